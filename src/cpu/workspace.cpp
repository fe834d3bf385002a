#include "cpu/workspace.hpp"

#include <algorithm>
#include <cstring>
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

// The larger of two sizes, in either arena's count.
std::int64_t larger(std::int64_t a, std::int64_t b) { return std::max(a, b); }
detail::ByteCount larger(detail::ByteCount a, detail::ByteCount b) { return std::max(a.value(), b.value()); }

}  // namespace

// d_k and d_v are even (whole tiles), so the arrays of pairs along them hold d_k / 2 or d_v / 2.
template <class Arena>
void BackwardWorkspace::lay_out(Arena& arena, BackwardWorkspace& ws, typename Arena::Count d_k,
                                typename Arena::Count d_v) {
  using Count = typename Arena::Count;
  const Count block = Arena::count(kMaxBackwardKeyBlock), half_block = Arena::count(kMaxBackwardKeyBlock / 2);
  const Count tile = Arena::count(kBackwardQueryBlock * kMaxBackwardKeyBlock);
  const Count half_tile = Arena::count(kBackwardQueryBlock * kMaxBackwardKeyBlock / 2);
  const Count widest = larger(d_k, d_v);
  ws.k_panels = arena.template take<float>(block * d_k);
  ws.k_rows = arena.template take<float>(block * d_k);
  ws.v_panels = arena.template take<float>(block * d_v);
  ws.v_rows = arena.template take<float>(block * d_v);
  ws.dk_acc = arena.template take<float>(block * d_k);
  ws.dv_acc = arena.template take<float>(block * d_v);
  ws.p = arena.template take<float>(tile);
  ws.ds = arena.template take<float>(tile);
  ws.tanh_s = arena.template take<float>(tile);
  ws.keep = arena.template take<float>(block);
  ws.mask_row = arena.template take<float>(block);
  ws.zero_row = arena.template take<float>(larger(widest, block));
  ws.out_row = arena.template take<float>(d_v);
  ws.dq_row = arena.template take<float>(d_k);
  ws.k_pair_panels = arena.template take<std::uint32_t>(half_block * d_k);
  ws.v_pair_panels = arena.template take<std::uint32_t>(half_block * d_v);
  ws.k_key_pairs = arena.template take<std::uint32_t>(half_block * d_k);
  ws.ds_pairs = arena.template take<std::uint32_t>(half_tile);
  ws.p_row_pairs = arena.template take<std::uint32_t>(half_tile);
  ws.ds_row_pairs = arena.template take<std::uint32_t>(half_tile);
  ws.pair_rows = arena.template take<std::uint16_t>(Arena::count(kMaxTileCols) * widest);
  ws.p_key_pairs = arena.template take<std::uint32_t>(block * Arena::count(kBlockRowPairs));
  ws.ds_key_pairs = arena.template take<std::uint32_t>(block * Arena::count(kBlockRowPairs));
  ws.q_block_pairs = arena.template take<std::uint32_t>(Arena::count(kBlockRowPairs) * d_k);
  ws.d_out_block_pairs = arena.template take<std::uint32_t>(Arena::count(kBlockRowPairs) * d_v);
  ws.seen = arena.template take<std::uint8_t>(tile);
  ws.row_info = arena.template take<RowInfo>(Arena::count(kBackwardQueryBlock));
}

detail::ByteCount BackwardWorkspace::bytes_for(detail::ByteCount padded_d_k, detail::ByteCount padded_d_v) {
  SizingArena arena;
  BackwardWorkspace unused;
  lay_out(arena, unused, padded_d_k, padded_d_v);
  return arena.bytes();
}

void BackwardWorkspace::prepare(std::int64_t padded_d_k, std::int64_t padded_d_v) {
  d_k = padded_d_k;
  d_v = padded_d_v;
  using detail::ByteCount;
  PlacingArena arena(buffer_.reserve(bytes_for(ByteCount::of(d_k), ByteCount::of(d_v)).value(),
                                     "the fast backward kernel's workspace"));
  lay_out(arena, *this, d_k, d_v);
  std::fill(zero_row, zero_row + std::max({d_k, d_v, kMaxBackwardKeyBlock}), 0.0f);
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
