// attnkit._core — the attention call, forward and backward. Every argument arrives already checked and shaped by
// python/attnkit/functional.py: q, k, v, out in attnkit's logical [B, H, n, d] order (any strides),
// the mask as rank 4 [B|1, Hq|1, n|1, m|1], the outputs freshly allocated. The library validates
// everything again and raises attnkit::Error, translated by runtime.cpp.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "attnkit/attention.hpp"
#include "bindings.hpp"
#include "options.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace attnkit::python {
namespace {

void sdpa(const InputArray& q, const InputArray& k, const InputArray& v, const OutputArray& out,
          const std::optional<OutputArray>& lse, const std::optional<OutputArray>& probs,
          const std::optional<InputArray>& mask, std::optional<double> scale, const std::string& causal,
          std::int64_t window_left, std::int64_t window_right, const std::vector<float>& alibi_slopes,
          double softcap, const std::vector<std::int64_t>& key_lengths, double dropout_p, std::uint64_t seed,
          const std::vector<float>& sinks) {
  const AttentionOptions options = options_of(mask, scale, causal, window_left, window_right, alibi_slopes, softcap,
                                              key_lengths, dropout_p, seed, sinks);
  ForwardExtras extras;
  if (lse) extras.lse = output_view("lse", *lse, 3);
  if (probs) extras.probs = output_view("probs", *probs, 4);
  const ConstTensorView query = input_view("query", q, 4);
  const ConstTensorView key = input_view("key", k, 4);
  const ConstTensorView value = input_view("value", v, 4);
  const TensorView output = output_view("out", out, 4);

  // The arrays stay referenced by this call's arguments, so their memory outlives the kernel; other
  // Python threads run meanwhile (the library's pool runs a second concurrent call on its caller's
  // thread, so concurrent calls never oversubscribe the cores).
  nb::gil_scoped_release release;
  forward(query, key, value, output, options, extras);
}

void sdpa_backward(const InputArray& q, const InputArray& k, const InputArray& v, const InputArray& out,
                   const InputArray& d_out, const InputArray& lse, const OutputArray& dq, const OutputArray& dk,
                   const OutputArray& dv, const std::optional<InputArray>& mask, std::optional<double> scale,
                   const std::string& causal, std::int64_t window_left, std::int64_t window_right,
                   const std::vector<float>& alibi_slopes, double softcap,
                   const std::vector<std::int64_t>& key_lengths, double dropout_p, std::uint64_t seed,
                   const std::vector<float>& sinks, const std::optional<OutputArray>& d_sinks) {
  const AttentionOptions options = options_of(mask, scale, causal, window_left, window_right, alibi_slopes, softcap,
                                              key_lengths, dropout_p, seed, sinks);
  BackwardExtras extras;
  if (d_sinks) extras.d_sinks = output_view("d_sinks", *d_sinks, 1);
  const ConstTensorView query = input_view("query", q, 4);
  const ConstTensorView key = input_view("key", k, 4);
  const ConstTensorView value = input_view("value", v, 4);
  const ConstTensorView output = input_view("out", out, 4);
  const ConstTensorView d_output = input_view("d_out", d_out, 4);
  const ConstTensorView log_sum_exp = input_view("lse", lse, 3);
  const TensorView d_query = output_view("dq", dq, 4);
  const TensorView d_key = output_view("dk", dk, 4);
  const TensorView d_value = output_view("dv", dv, 4);

  nb::gil_scoped_release release;
  backward(query, key, value, output, d_output, log_sum_exp, d_query, d_key, d_value, options, extras);
}

}  // namespace

void bind_sdpa(nb::module_& m) {
  m.def("sdpa", &sdpa, "query"_a, "key"_a, "value"_a, "out"_a, nb::kw_only(), "lse"_a.none() = nb::none(),
        "probs"_a.none() = nb::none(), "attn_mask"_a.none() = nb::none(), "scale"_a.none() = nb::none(), "causal"_a = "none",
        "window_left"_a = -1, "window_right"_a = -1, "alibi_slopes"_a = std::vector<float>{},
        "softcap"_a = 0.0, "key_lengths"_a = std::vector<std::int64_t>{}, "dropout_p"_a = 0.0, "seed"_a = 0,
        "sinks"_a = std::vector<float>{},
        "attnkit::forward on [B, H, n, d] views: writes out (and lse [B, Hq, n] float32, probs [B, Hq, n, m] "
        "when given). Internal: call attnkit.scaled_dot_product_attention instead.");
  m.def("sdpa_backward", &sdpa_backward, "query"_a, "key"_a, "value"_a, "out"_a, "d_out"_a, "lse"_a, "dq"_a, "dk"_a,
        "dv"_a, nb::kw_only(), "attn_mask"_a.none() = nb::none(), "scale"_a.none() = nb::none(),
        "causal"_a = "none", "window_left"_a = -1, "window_right"_a = -1,
        "alibi_slopes"_a = std::vector<float>{}, "softcap"_a = 0.0, "key_lengths"_a = std::vector<std::int64_t>{},
        "dropout_p"_a = 0.0, "seed"_a = 0, "sinks"_a = std::vector<float>{}, "d_sinks"_a.none() = nb::none(),
        "attnkit::backward on [B, H, n, d] views: writes dq, dk, dv (and d_sinks [Hq] float32 when given) from "
        "the forward's out and lse. "
        "Internal: attnkit.torch's autograd function calls it.");
}

}  // namespace attnkit::python
