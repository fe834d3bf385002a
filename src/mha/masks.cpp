#include "mha/masks.hpp"

#include <cstddef>
#include <limits>
#include <string>

#include "attnkit/error.hpp"

namespace attnkit::mha {
namespace {

[[noreturn]] void fail(const std::string& message) { throw Error(ErrorCode::invalid_shape, message); }

void check_dtype(const char* name, ConstTensorView mask) {
  if (mask.dtype() != DType::boolean && !is_floating(mask.dtype())) {
    throw Error(ErrorCode::invalid_dtype, std::string(name) + ": " + std::string(dtype_name(mask.dtype())) +
                                              " mask; expected bool (true = masked out) or floating (added to the logits)");
  }
}

// Value of a mask element as an additive bias: −inf for a bool true (masked out), 0 for false.
double as_bias(ConstTensorView mask, const void* element) {
  const double value = load_as_double(element, mask.dtype());
  if (mask.dtype() == DType::boolean) return value != 0 ? -std::numeric_limits<double>::infinity() : 0.0;
  return value;
}

const void* element(ConstTensorView t, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
  const std::int64_t offset = b * t.stride(0) + h * t.stride(1) + i * t.stride(2) + j * t.stride(3);
  return static_cast<const std::byte*>(t.data()) + offset * static_cast<std::int64_t>(dtype_size(t.dtype()));
}

}  // namespace

std::optional<ConstTensorView> kernel_mask(const MultiHeadAttentionOptions& o, std::int64_t batch, std::int64_t heads,
                                           std::int64_t n, std::int64_t m, bool unbatched, Tensor& storage) {
  // key_padding_mask as [B, 1, 1, m]; attn_mask as [1, 1, n, m] or [B, H, n, m].
  std::optional<ConstTensorView> padding, attn;
  if (o.key_padding_mask) {
    const ConstTensorView p = *o.key_padding_mask;
    check_dtype("key_padding_mask", p);
    const std::int64_t want_rank = unbatched ? 1 : 2;
    if (p.rank() != want_rank || p.size(want_rank - 1) != m || (!unbatched && p.size(0) != batch)) {
      fail("key_padding_mask: expected shape " + std::string(unbatched ? "[m] = [" : "[B, m] = [" + std::to_string(batch) + ", ") +
           std::to_string(m) + "], got " + p.shape_string());
    }
    const std::int64_t sizes[4] = {batch, 1, 1, m};
    const std::int64_t strides[4] = {unbatched ? 0 : p.stride(0), 0, 0, p.stride(want_rank - 1)};
    padding = ConstTensorView(p.data(), p.dtype(), sizes, strides, 4);
  }
  if (o.attn_mask) {
    const ConstTensorView a = *o.attn_mask;
    check_dtype("attn_mask", a);
    if (a.rank() == 2 && a.size(0) == n && a.size(1) == m) {
      const std::int64_t sizes[4] = {1, 1, n, m};
      const std::int64_t strides[4] = {0, 0, a.stride(0), a.stride(1)};
      attn = ConstTensorView(a.data(), a.dtype(), sizes, strides, 4);
    } else if (a.rank() == 3 && a.size(0) == batch * heads && a.size(1) == n && a.size(2) == m) {
      const std::int64_t sizes[4] = {batch, heads, n, m};
      const std::int64_t strides[4] = {heads * a.stride(0), a.stride(0), a.stride(1), a.stride(2)};
      attn = ConstTensorView(a.data(), a.dtype(), sizes, strides, 4);
    } else {
      fail("attn_mask: expected shape [n, m] = [" + std::to_string(n) + ", " + std::to_string(m) +
           "] or [B·num_heads, n, m] = [" + std::to_string(batch * heads) + ", " + std::to_string(n) + ", " +
           std::to_string(m) + "], got " + a.shape_string());
    }
  }
  if (!padding && !attn) return std::nullopt;
  // One float mask: used as it is.
  if (!(padding && attn)) {
    const ConstTensorView only = padding ? *padding : *attn;
    if (only.dtype() != DType::boolean) return only;
  }
  // Otherwise build it: inverted bools (keep = not masked), or the sum of both as biases.
  const bool all_bool = (!padding || padding->dtype() == DType::boolean) && (!attn || attn->dtype() == DType::boolean);
  const std::int64_t mask_heads = attn && attn->size(1) != 1 ? heads : 1;
  const std::int64_t mask_batch = padding || (attn && attn->size(0) != 1) ? batch : 1;
  const std::int64_t mask_rows = attn ? n : 1;
  storage = Tensor(all_bool ? DType::boolean : DType::f32, {mask_batch, mask_heads, mask_rows, m});
  for (std::int64_t b = 0; b < mask_batch; ++b)
    for (std::int64_t h = 0; h < mask_heads; ++h)
      for (std::int64_t i = 0; i < mask_rows; ++i)
        for (std::int64_t j = 0; j < m; ++j) {
          double bias = 0;
          if (padding) bias += as_bias(*padding, element(*padding, b, 0, 0, j));
          if (attn) bias += as_bias(*attn, element(*attn, attn->size(0) == 1 ? 0 : b, attn->size(1) == 1 ? 0 : h, i, j));
          const std::int64_t at = ((b * mask_heads + h) * mask_rows + i) * m + j;
          if (all_bool) {
            storage.data<bool>()[at] = bias == 0;  // both bool: 0 or −inf
          } else {
            storage.data<float>()[at] = static_cast<float>(bias);
          }
        }
  return storage.view();
}

}  // namespace attnkit::mha
