// Parsing of the attention option flags and reading of Q, K, V checks, shared by run and heatmap.
#include "attention_flags.hpp"

#include <cstddef>
#include <limits>
#include <utility>

#include "attnkit/attention.hpp"
#include "attnkit/error.hpp"
#include "command_line.hpp"

namespace attnkit::cli {

namespace {

constexpr int kMinInputRank = 2;       // [S, D]: one head of one batch
constexpr int kMaskRankWithHeads = 3;  // [H, n, m], the mask that goes with rank-3 inputs
constexpr std::size_t kWindowSides = 2;

Causal parse_causal(std::string_view text, std::string_view flag) {
  if (text == "none") return Causal::none;
  if (text == "top-left" || text == "top_left") return Causal::top_left;
  if (text == "bottom-right" || text == "bottom_right") return Causal::bottom_right;
  throw UsageError(std::string(flag) + ": '" + std::string(text) + "' is not one of top-left, bottom-right, none");
}

DType parse_dtype(std::string_view text, std::string_view flag) {
  for (DType d : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
    if (text == dtype_name(d)) return d;
  }
  throw UsageError(std::string(flag) + ": '" + std::string(text) + "' is not one of f64, f32, bf16, f16");
}

Window parse_window(std::string_view text, std::string_view flag) {
  const auto sides = parse_integer_list(text, flag);
  if (sides.size() != kWindowSides) {
    throw UsageError(std::string(flag) + ": expected two integers L,R (-1 = unbounded), got " + std::to_string(sides.size()) +
                     " in '" + std::string(text) + "'");
  }
  return Window{sides[0], sides[1]};
}

std::vector<float> parse_float_list(std::string_view text, std::string_view flag) {
  const auto values = parse_number_list(text, flag);
  return {values.begin(), values.end()};
}

int parse_threads(std::string_view text, std::string_view flag) {
  const std::int64_t n = parse_integer(text, flag);
  if (n < 0 || n > attnkit::kMaxThreads) {
    throw UsageError(std::string(flag) + ": " + std::string(text) + " is not a thread count: 0 (the default) to " +
                     std::to_string(attnkit::kMaxThreads));
  }
  return static_cast<int>(n);
}

}  // namespace

Kernel parse_kernel(std::string_view text, std::string_view flag) {
  if (text == "auto") return Kernel::automatic;
  if (text == "reference") return Kernel::reference;
  if (text == "fast") return Kernel::fast;
  throw UsageError(std::string(flag) + ": '" + std::string(text) + "' is not one of auto, reference, fast");
}

void add_attention_flags(CommandLine& c, AttentionFlags& f, bool dropout) {
  AttentionOptions& o = f.options;
  c.value("--scale", o.scale, parse_number, "S", "logit scale (default 1/sqrt(d_k))");
  c.value("--causal", o.causal, parse_causal, "MODE",
          "none (default), top-left (key j visible when j <= i) or\n"
          "bottom-right (j <= i + m - n, as in KV-cache decoding)");
  c.value("--window", o.window, parse_window, "L,R",
          "sliding window: keys i'-L <= j <= i'+R are visible; -1 = unbounded side");
  c.text("--mask", f.mask_path, "PATH",
         "bool keep-mask (true = attend) or floating additive bias, shape [n, m],\n"
         "[H, n, m] (for rank-3 inputs) or [B|1, H|1, n, m]");
  c.value("--key-lengths", f.key_lengths, parse_integer_list, "LIST", "valid keys per batch, e.g. 5,7 (the rest are padding)");
  c.value("--alibi", f.alibi_slopes, parse_float_list, "LIST", "one ALiBi slope per query head, e.g. 0.5,0.25");
  c.value("--softcap", o.softcap, parse_number, "C", "cap the logits with C·tanh(s/C)");
  if (dropout) {
    c.value("--dropout", o.dropout_p, parse_number, "P", "dropout probability in [0, 1); kept weights are scaled by 1/(1-P)");
    c.value("--seed", o.seed, parse_unsigned, "N", "dropout seed (default 0); the same seed gives the same output");
  }
  c.value("--dtype", f.dtype, parse_dtype, "T",
          "compute dtype f64, f32, bf16 or f16, to which every input is converted\n"
          "(default: the dtype of Q, which K, V and dO must then have); the outputs and\n"
          "gradients use it too, except that bf16 is written as float32");
  c.value("--kernel", o.kernel, parse_kernel, "K", "auto (default), reference (the float64 oracle) or fast");
  c.value("--threads", f.threads, parse_threads, "N",
          "threads for the kernels; 0 or absent: ATTNKIT_NUM_THREADS or all cores");
}

AttentionOptions with_spans(const AttentionFlags& flags, const Tensor* mask) {
  AttentionOptions options = flags.options;
  options.key_lengths = flags.key_lengths;
  options.alibi_slopes = flags.alibi_slopes;
  if (mask != nullptr) {
    // A view has at most 4 dimensions: a deeper mask is refused here, by its flag and file, rather
    // than by the view's own constructor, which knows neither.
    if (mask->rank() > kAttentionRank) {
      throw Error(ErrorCode::invalid_shape, "--mask " + flags.mask_path.value_or("") + ": shape " + shape_of(*mask) +
                                                " has " + std::to_string(mask->rank()) +
                                                " dimensions; a mask is [n, m], [H, n, m] or [B, H, n, m]");
    }
    options.mask = mask_view(*mask);
  }
  return options;
}

std::string shape_of(const Tensor& t) {
  std::string text = "[";
  for (std::size_t d = 0; d < t.shape().size(); ++d) text += (d ? ", " : "") + std::to_string(t.shape()[d]);
  return text + "]";
}

void check_rank(const Tensor& t, std::string_view flag, const std::string& path) {
  if (t.rank() < kMinInputRank || t.rank() > kAttentionRank) {
    throw Error(ErrorCode::invalid_shape, std::string(flag) + " " + path +
                                              ": expected rank 2 [S, D], 3 [H, S, D] or 4 [B, H, S, D], got shape " +
                                              shape_of(t));
  }
}

DType compute_dtype(const std::optional<DType>& requested, const Tensor& q, const std::string& q_path) {
  if (requested) return *requested;
  if (q.dtype() == DType::f64 || q.dtype() == DType::f32 || q.dtype() == DType::f16) return q.dtype();
  throw Error(ErrorCode::invalid_dtype, "--q " + q_path + " has dtype " + std::string(dtype_name(q.dtype())) +
                                            "; Q must be a float16, float32 or float64 array (or pass --dtype)");
}

Tensor as_dtype(Tensor t, DType dtype) {
  if (t.dtype() == dtype) return t;
  return Tensor::converted(t.view(), dtype);
}

Tensor input_as(Tensor t, DType dtype, const std::optional<DType>& requested, std::string_view flag,
                const std::string& path) {
  if (!requested && t.dtype() != dtype) {
    throw Error(ErrorCode::invalid_dtype, std::string(flag) + " " + path + " has dtype " +
                                              std::string(dtype_name(t.dtype())) + " but --q has " + std::string(dtype_name(dtype)) +
                                              "; pass --dtype to convert every input to one dtype");
  }
  return as_dtype(std::move(t), dtype);
}

ConstTensorView mask_view(const Tensor& mask) {
  if (mask.rank() == kMaskRankWithHeads) return mask.view().unsqueezed_to(kAttentionRank);
  return mask.view();
}

}  // namespace attnkit::cli
