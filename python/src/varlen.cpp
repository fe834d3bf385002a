// attnkit._core — packed variable-length batches (attnkit/varlen.hpp), forward and backward. The
// arguments arrive checked and shaped by python/attnkit/varlen.py: q, k, v, out and the gradients
// packed [total, H, d] (any strides), the offsets rank 1 int32 or int64, lse [Hq, total_q], the mask
// rank 4 [B|1, Hq|1, max_n|1, max_m|1]. The library validates everything again.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "attnkit/varlen.hpp"
#include "bindings.hpp"
#include "options.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace attnkit::python {
namespace {

const std::vector<std::int64_t> kNoKeyLengths;  // the offsets give each sequence its keys

void varlen(const InputArray& q, const InputArray& k, const InputArray& v, const InputArray& cu_q,
            const InputArray& cu_k, const OutputArray& out, const std::optional<OutputArray>& lse,
            const std::optional<OutputArray>& probs, const std::optional<InputArray>& mask,
            std::optional<double> scale, const std::string& causal, std::int64_t window_left, std::int64_t window_right,
            const std::vector<float>& alibi_slopes, double softcap, double dropout_p, std::uint64_t seed,
            const std::vector<float>& sinks) {
  const AttentionOptions options = options_of(mask, scale, causal, window_left, window_right, alibi_slopes, softcap,
                                              kNoKeyLengths, dropout_p, seed, sinks);
  ForwardExtras extras;
  if (lse) extras.lse = output_view("lse", *lse, 2);
  if (probs) extras.probs = output_view("probs", *probs, 4);
  const SequenceOffsets offsets{input_view("cu_seqlens_q", cu_q, 1), input_view("cu_seqlens_k", cu_k, 1)};
  const ConstTensorView query = input_view("q", q, 3), key = input_view("k", k, 3), value = input_view("v", v, 3);
  const TensorView output = output_view("out", out, 3);
  nb::gil_scoped_release release;  // the arrays stay referenced by the arguments meanwhile
  varlen_forward(query, key, value, offsets, output, options, extras);
}

void varlen_backward_call(const InputArray& q, const InputArray& k, const InputArray& v, const InputArray& cu_q,
                          const InputArray& cu_k, const InputArray& out, const InputArray& d_out, const InputArray& lse,
                          const OutputArray& dq, const OutputArray& dk, const OutputArray& dv,
                          const std::optional<InputArray>& mask, std::optional<double> scale, const std::string& causal,
                          std::int64_t window_left, std::int64_t window_right, const std::vector<float>& alibi_slopes,
                          double softcap, double dropout_p, std::uint64_t seed, const std::vector<float>& sinks,
                          const std::optional<OutputArray>& d_sinks) {
  const AttentionOptions options = options_of(mask, scale, causal, window_left, window_right, alibi_slopes, softcap,
                                              kNoKeyLengths, dropout_p, seed, sinks);
  BackwardExtras extras;
  if (d_sinks) extras.d_sinks = output_view("d_sinks", *d_sinks, 1);
  const SequenceOffsets offsets{input_view("cu_seqlens_q", cu_q, 1), input_view("cu_seqlens_k", cu_k, 1)};
  const ConstTensorView query = input_view("q", q, 3), key = input_view("k", k, 3), value = input_view("v", v, 3);
  const ConstTensorView output = input_view("out", out, 3), d_output = input_view("d_out", d_out, 3);
  const ConstTensorView log_sum_exp = input_view("lse", lse, 2);
  const TensorView d_query = output_view("dq", dq, 3), d_key = output_view("dk", dk, 3), d_value = output_view("dv", dv, 3);
  nb::gil_scoped_release release;
  varlen_backward(query, key, value, offsets, output, d_output, log_sum_exp, d_query, d_key, d_value, options, extras);
}

}  // namespace

void bind_varlen(nb::module_& m) {
  m.def("varlen", &varlen, "q"_a, "k"_a, "v"_a, "cu_seqlens_q"_a, "cu_seqlens_k"_a, "out"_a, nb::kw_only(),
        "lse"_a.none() = nb::none(), "probs"_a.none() = nb::none(), "attn_mask"_a.none() = nb::none(),
        "scale"_a.none() = nb::none(), "causal"_a = "none", "window_left"_a = -1, "window_right"_a = -1,
        "alibi_slopes"_a = std::vector<float>{}, "softcap"_a = 0.0, "dropout_p"_a = 0.0, "seed"_a = 0,
        "sinks"_a = std::vector<float>{},
        "attnkit::varlen_forward on packed [total, H, d] views. Internal: call attnkit.varlen_attention instead.");
  m.def("varlen_backward", &varlen_backward_call, "q"_a, "k"_a, "v"_a, "cu_seqlens_q"_a, "cu_seqlens_k"_a, "out"_a,
        "d_out"_a, "lse"_a, "dq"_a, "dk"_a, "dv"_a, nb::kw_only(), "attn_mask"_a.none() = nb::none(),
        "scale"_a.none() = nb::none(), "causal"_a = "none", "window_left"_a = -1, "window_right"_a = -1,
        "alibi_slopes"_a = std::vector<float>{}, "softcap"_a = 0.0, "dropout_p"_a = 0.0, "seed"_a = 0,
        "sinks"_a = std::vector<float>{}, "d_sinks"_a.none() = nb::none(),
        "attnkit::varlen_backward on packed views (and d_sinks [Hq] float32 when given). Internal: "
        "attnkit.varlen_attention's autograd calls it.");
}

}  // namespace attnkit::python
