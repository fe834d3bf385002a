#include "cpu/workspace.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <iterator>
#include <string>

#include "attnkit/error.hpp"

namespace attnkit::cpu {

std::byte* WorkspaceBuffer::reserve(std::size_t bytes, const char* owner) {
  if (bytes <= capacity_) return buffer_.get();
  buffer_.reset();  // the old block goes first: growing never needs both at once
  capacity_ = 0;
  try {
    buffer_.reset(static_cast<std::byte*>(::operator new(bytes, kAlignment)));
  } catch (const std::bad_alloc&) {
    throw Error(ErrorCode::out_of_memory, std::string(owner) + ": cannot allocate " + std::to_string(bytes) + " bytes");
  }
  std::memset(buffer_.get(), 0, bytes);
  capacity_ = bytes;
  return buffer_.get();
}

namespace {

constexpr std::size_t kBackwardAlignment = 64;
std::size_t aligned_up(std::size_t bytes) { return (bytes + kBackwardAlignment - 1) / kBackwardAlignment * kBackwardAlignment; }

// The backward workspace's arrays of 4-byte elements, in layout order (the pointers prepare() sets,
// same order): the float arrays, then the bf16-dot path's (d_k and d_v are even: whole tiles).
std::array<detail::ByteCount, 21> backward_floats(detail::ByteCount dk, detail::ByteCount dv) {
  using detail::ByteCount;
  const ByteCount block = ByteCount::of(kMaxBackwardKeyBlock), tile = ByteCount::of(kBackwardQueryBlock * kMaxBackwardKeyBlock);
  const ByteCount half_block = ByteCount::of(kMaxBackwardKeyBlock / 2);
  const ByteCount half_tile = ByteCount::of(kBackwardQueryBlock * kMaxBackwardKeyBlock / 2);
  const ByteCount widest = std::max(dk.value(), dv.value());
  return {block * dk, block * dk, block * dv, block * dv, block * dk, block * dv, tile, tile, tile, block, block, widest, dv, dk,
          half_block * dk, half_block * dv, half_block * dk, half_tile, half_tile, half_tile,
          ByteCount::of(kMaxTileCols / 2) * widest};
}

}  // namespace

detail::ByteCount BackwardWorkspace::bytes_for(detail::ByteCount padded_d_k, detail::ByteCount padded_d_v) {
  detail::ByteCount bytes = aligned_up(static_cast<std::size_t>(kBackwardQueryBlock * kMaxBackwardKeyBlock)) +
                            aligned_up(static_cast<std::size_t>(kBackwardQueryBlock) * sizeof(RowInfo));
  for (detail::ByteCount n : backward_floats(padded_d_k, padded_d_v)) bytes += n * sizeof(float) + (kBackwardAlignment - 1);
  return bytes;
}

void BackwardWorkspace::prepare(std::int64_t padded_d_k, std::int64_t padded_d_v) {
  d_k = padded_d_k;
  d_v = padded_d_v;
  using detail::ByteCount;
  std::byte* cursor = buffer_.reserve(bytes_for(ByteCount::of(d_k), ByteCount::of(d_v)).value(),
                                      "the fast backward kernel's workspace");
  float* bf16_arrays[7];  // the bf16-dot path's arrays, typed below
  float** arrays[] = {&k_panels,       &k_rows,         &v_panels,       &v_rows,         &dk_acc,
                      &dv_acc,         &p,              &ds,             &tanh_s,         &keep,
                      &mask_row,       &zero_row,       &out_row,        &dq_row,         &bf16_arrays[0],
                      &bf16_arrays[1], &bf16_arrays[2], &bf16_arrays[3], &bf16_arrays[4], &bf16_arrays[5],
                      &bf16_arrays[6]};
  const auto floats = backward_floats(ByteCount::of(d_k), ByteCount::of(d_v));
  static_assert(std::size(arrays) == std::tuple_size_v<decltype(floats)>);
  for (std::size_t a = 0; a < std::size(arrays); ++a) {
    *arrays[a] = reinterpret_cast<float*>(cursor);
    cursor += aligned_up(floats[a].value() * sizeof(float));
  }
  k_pair_panels = reinterpret_cast<std::uint32_t*>(bf16_arrays[0]);
  v_pair_panels = reinterpret_cast<std::uint32_t*>(bf16_arrays[1]);
  k_key_pairs = reinterpret_cast<std::uint32_t*>(bf16_arrays[2]);
  ds_pairs = reinterpret_cast<std::uint32_t*>(bf16_arrays[3]);
  p_row_pairs = reinterpret_cast<std::uint32_t*>(bf16_arrays[4]);
  ds_row_pairs = reinterpret_cast<std::uint32_t*>(bf16_arrays[5]);
  pair_rows = reinterpret_cast<std::uint16_t*>(bf16_arrays[6]);
  seen = reinterpret_cast<std::uint8_t*>(cursor);
  cursor += aligned_up(static_cast<std::size_t>(kBackwardQueryBlock * kMaxBackwardKeyBlock));
  row_info = reinterpret_cast<RowInfo*>(cursor);
  std::fill(zero_row, zero_row + std::max(d_k, d_v), 0.0f);
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
