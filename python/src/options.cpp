// attnkit._core — options from keyword arguments (see options.hpp).
#include "options.hpp"

#include "attnkit/error.hpp"

namespace attnkit::python {
namespace {

Causal causal_of(const std::string& causal) {
  if (causal == "none") return Causal::none;
  if (causal == "top_left") return Causal::top_left;
  if (causal == "bottom_right") return Causal::bottom_right;
  throw Error(ErrorCode::invalid_argument,
              "causal_alignment: expected \"top_left\" or \"bottom_right\", got \"" + causal + "\"");
}

}  // namespace

AttentionOptions options_of(const std::optional<InputArray>& mask, std::optional<double> scale, const std::string& causal,
                            std::int64_t window_left, std::int64_t window_right, const std::vector<float>& alibi_slopes,
                            double softcap, const std::vector<std::int64_t>& key_lengths, double dropout_p,
                            std::uint64_t seed, const std::vector<float>& sinks) {
  AttentionOptions options;
  options.scale = scale;
  options.causal = causal_of(causal);
  options.window = {window_left, window_right};
  if (mask) options.mask = input_view("attn_mask", *mask, 4);
  options.alibi_slopes = alibi_slopes;
  options.softcap = softcap;
  options.key_lengths = key_lengths;
  options.dropout_p = dropout_p;
  options.seed = seed;
  options.sinks = sinks;
  return options;
}

}  // namespace attnkit::python
