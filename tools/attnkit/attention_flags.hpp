// The flags that define one attention problem on .npy files (the options of AttentionOptions, the
// mask, the compute dtype, the threads) and the reading of Q, K and V: shared by `attnkit run` and
// `attnkit heatmap`, so both accept the same spelling and report the same errors.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attnkit/options.hpp"
#include "attnkit/tensor.hpp"

namespace attnkit::cli {

class CommandLine;  // command_line.hpp

inline constexpr int kAttentionRank = 4;  // [B, H, S, D], the library's logical layout

// What the option flags say, parsed and checked for form before any file is touched.
struct AttentionFlags {
  AttentionOptions options;  // plain values only: with_spans() attaches the lists and the mask
  std::vector<std::int64_t> key_lengths;
  std::vector<float> alibi_slopes;
  std::optional<std::string> mask_path;
  std::optional<DType> dtype;
  std::optional<int> threads;
};

// --kernel's value: auto, reference or fast; anything else is a UsageError naming `flag` (bench's
// --kernel reads it too).
Kernel parse_kernel(std::string_view text, std::string_view flag);

// Adds --scale --causal --window --mask --key-lengths --alibi --softcap, with `dropout` --dropout and
// --seed, then --dtype --kernel --threads to the current section of `command_line`; its parse fills
// `flags` (which must outlive it) from those given.
void add_attention_flags(CommandLine& command_line, AttentionFlags& flags, bool dropout);

// `flags.options` with key_lengths and alibi_slopes pointing into `flags`, and the mask (read by
// the caller from flags.mask_path into `mask`) attached.
AttentionOptions with_spans(const AttentionFlags& flags, const Tensor* mask);

// "[2, 3]" from the tensor's own shape (a file may hold a rank above 4, which view() cannot show).
std::string shape_of(const Tensor& t);

// Throws Error(invalid_shape) naming the flag and the file unless t has rank 2, 3 or 4.
void check_rank(const Tensor& t, std::string_view flag, const std::string& path);

// The dtype the computation runs in: --dtype, else Q's own (f64, f32 or f16).
DType compute_dtype(const std::optional<DType>& requested, const Tensor& q, const std::string& q_path);

// t converted to `dtype` (unchanged when it already has it).
Tensor as_dtype(Tensor t, DType dtype);

// An input read from `path` for `flag` (--k, --v, --d-out) in the computation's dtype: converted when
// --dtype was given (`requested`), which converts every input; otherwise it must already have Q's
// dtype, and Error(invalid_dtype) names both dtypes (float64 keys quietly becoming float16 would
// change the answer without a word).
Tensor input_as(Tensor t, DType dtype, const std::optional<DType>& requested, std::string_view flag,
                const std::string& path);

// A rank-3 mask goes with rank-3 inputs: [H, n, m] -> [1, H, n, m]. Ranks 2 and 4 pass as they are.
ConstTensorView mask_view(const Tensor& mask);

}  // namespace attnkit::cli
