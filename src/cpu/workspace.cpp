#include "cpu/workspace.hpp"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <string>

#include "attnkit/error.hpp"

namespace attnkit::cpu {

void ForwardWorkspace::reserve(std::size_t bytes) {
  if (bytes <= capacity_) return;
  std::byte* p = static_cast<std::byte*>(std::aligned_alloc(kAlignment, aligned(bytes)));
  if (p == nullptr) {
    throw Error(ErrorCode::out_of_memory, "fast kernel: cannot allocate a " + std::to_string(bytes) +
                                              "-byte workspace");
  }
  std::memset(p, 0, aligned(bytes));  // touch every page once, here, not in the hot loop
  buffer_.reset(p);
  capacity_ = aligned(bytes);
}

void BackwardWorkspace::prepare(std::int64_t padded_d_k, std::int64_t padded_d_v) {
  d_k = padded_d_k;
  d_v = padded_d_v;
  constexpr std::size_t kAlignment = 64;
  const auto aligned = [](std::size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; };
  const auto block = static_cast<std::size_t>(kBackwardKeyBlock);
  const auto tile = static_cast<std::size_t>(kBackwardQueryBlock * kBackwardKeyBlock);
  const auto dk = static_cast<std::size_t>(d_k), dv = static_cast<std::size_t>(d_v);
  float** arrays[] = {&k_panels, &k_rows, &v_panels, &v_rows, &dk_acc, &dv_acc, &p, &ds, &tanh_s, &keep, &mask_row, &zero_row};
  const std::size_t floats[] = {block * dk, block * dk, block * dv, block * dv, block * dk, block * dv,
                                tile, tile, tile, block, block, std::max(dk, dv)};
  std::size_t bytes = aligned(tile) + aligned(static_cast<std::size_t>(kBackwardQueryBlock) * sizeof(RowInfo));
  for (std::size_t n : floats) bytes += aligned(n * sizeof(float));
  if (bytes > capacity_) {
    auto* fresh = static_cast<std::byte*>(std::aligned_alloc(kAlignment, bytes));
    if (fresh == nullptr) {
      throw Error(ErrorCode::out_of_memory, "fast backward: cannot allocate a " + std::to_string(bytes) + "-byte workspace");
    }
    std::memset(fresh, 0, bytes);  // touch every page once, here, not in the hot loop
    buffer_.reset(fresh);
    capacity_ = bytes;
  }
  std::byte* cursor = buffer_.get();
  for (std::size_t a = 0; a < std::size(arrays); ++a) {
    *arrays[a] = reinterpret_cast<float*>(cursor);
    cursor += aligned(floats[a] * sizeof(float));
  }
  seen = reinterpret_cast<std::uint8_t*>(cursor);
  cursor += aligned(tile);
  row_info = reinterpret_cast<RowInfo*>(cursor);
  std::fill(zero_row, zero_row + std::max(dk, dv), 0.0f);
}

BackwardWorkspace& thread_backward_workspace() {
  thread_local BackwardWorkspace workspace;
  return workspace;
}

ForwardWorkspace& thread_workspace() {
  thread_local ForwardWorkspace workspace;
  return workspace;
}

}  // namespace attnkit::cpu
