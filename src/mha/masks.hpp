// torch.nn.MultiheadAttention's two masks, in torch's meanings (bool true = masked out), turned into
// the one mask of attnkit::AttentionOptions (bool true = keep, or additive).
#pragma once

#include <cstdint>
#include <optional>

#include "attnkit/mha.hpp"

namespace attnkit::mha {

// The kernel's mask for a call of `batch` sequences, `heads` query heads, n queries and m keys:
// none when neither mask is given; a view of the caller's float mask when one float mask is given
// (no copy); else a mask built in `storage` (bool masks are inverted; two masks are combined, which
// costs B·(H)·n·m elements when both are given).
std::optional<ConstTensorView> kernel_mask(const MultiHeadAttentionOptions& o, std::int64_t batch, std::int64_t heads,
                                           std::int64_t n, std::int64_t m, bool unbatched, Tensor& storage);

}  // namespace attnkit::mha
