/// \file
/// Scaled dot-product attention, forward and backward.
///
/// \code{.unparsed}
///   O = dropout(softmax(logits(Q, K))) · V          logits as in attnkit/options.hpp
///
/// Shapes, in logical order (any strides):
///   q    [B, Hq,  n, d_k]        k [B, Hkv, m, d_k]        v [B, Hkv, m, d_v]
///   out  [B, Hq,  n, d_v]        lse [B, Hq, n] (f32)      probs [B, Hq, n, m]
/// \endcode
/// Hq % Hkv == 0; query head h reads KV head h / (Hq / Hkv) (GQA; Hkv = 1 is MQA).
/// q, k, v and out share one floating dtype; gradients share it too.
///
/// Guarantees: every element of every output is written. A query row with no visible key gives
/// out = 0, lse = −inf, probs = 0 and zero gradients, never NaN. Zero sizes are valid. Bad input
/// raises attnkit::Error naming the argument and the shapes; nothing is written then.
///
/// NaN rule: a NaN reaches exactly the outputs that depend on it through the formula over visible
/// keys. NaN in q[b,h,i,:] → row i of out and lse. NaN in k[b,g,j,:] or in an additive mask entry
/// (i, j) → every row i for which key j is visible. NaN in v[b,g,j,c] → column c of every row i for
/// which key j is visible (dropped-out keys are still visible; masked keys are not).
#pragma once

#include <optional>

#include "attnkit/options.hpp"
#include "attnkit/tensor.hpp"

/// Exact scaled dot-product attention on CPUs: tensors, attention forward and backward, the
/// multi-head module, the KV cache, file I/O and runtime settings. Failures raise attnkit::Error.
namespace attnkit {

/// Optional outputs of forward() beyond `out`; an empty member is not computed.
struct ForwardExtras {
  std::optional<TensorView> lse{};    ///< [B, Hq, n] f32: natural-log sum of exp of the final logits
  std::optional<TensorView> probs{};  ///< [B, Hq, n, m] any floating dtype: softmax weights before dropout
};

/// Attention forward: writes `out` [B, Hq, n, d_v] = dropout(softmax(logits(q, k))) · v, and the
/// extras asked for (lse, probs). Shapes and guarantees as described for this file; raises
/// attnkit::Error on bad input (nothing is written then).
void forward(ConstTensorView q, ConstTensorView k, ConstTensorView v, TensorView out,
             const AttentionOptions& options = {}, const ForwardExtras& extras = {});

/// Optional outputs of a backward call.
struct BackwardExtras {
  /// [Hq] f32, with options.sinks: ∂L/∂sinks, summed over the batch and the queries of each head.
  std::optional<TensorView> d_sinks{};
};

/// Gradients of a scalar loss L given d_out = ∂L/∂out, written (not accumulated) to dq, dk, dv.
/// `out` and `lse` are those the forward
/// returned for the same inputs and options: the fast kernel recomputes the probabilities as
/// exp(logit − lse) and uses D = rowsum(d_out ∘ out), so stale or mismatched ones give wrong
/// gradients; the float64 reference recomputes everything and only checks their shapes. dk and dv
/// sum over the query heads that share a KV head. With attention sinks, `extras.d_sinks` receives
/// their gradient (or is left out when the sinks are not trained). Deterministic: bitwise identical
/// for any thread count.
void backward(ConstTensorView q, ConstTensorView k, ConstTensorView v, ConstTensorView out,
              ConstTensorView d_out, ConstTensorView lse, TensorView dq, TensorView dk, TensorView dv,
              const AttentionOptions& options = {}, const BackwardExtras& extras = {});

/// The kernel a forward or backward call with `requested` and inputs of `dtype` runs: `automatic`
/// resolves to the fast kernel for f32, f16 and bf16 and to the float64 reference for f64. Raises
/// Error(unsupported) when the requested kernel cannot take the call; a call never falls back
/// silently from a kernel that was asked for by name.
Kernel resolve_kernel(Kernel requested, DType dtype = DType::f32);
/// Stable name of a kernel: "automatic", "reference" or "fast".
const char* kernel_name(Kernel kernel) noexcept;

/// The most threads attnkit's kernels run on (a larger request is a mistake, not a machine).
inline constexpr int kMaxThreads = 1024;

/// Sets the threads used by attnkit's kernels. Default: ATTNKIT_NUM_THREADS if set (a whole number in
/// [1, kMaxThreads]; anything else is ignored), else hardware concurrency. n <= 0 restores the
/// default; n > kMaxThreads raises Error(invalid_argument) and leaves the setting as it was. A call
/// never starts more threads than it has independent pieces of work.
/// Results never depend on the thread count.
void set_num_threads(int n);
/// The thread count calls run on: the set_num_threads() setting, or fewer if the system has
/// refused to create a thread.
int num_threads();

/// Library version, "MAJOR.MINOR.PATCH".
const char* version() noexcept;

}  // namespace attnkit
