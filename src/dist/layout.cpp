// Which global positions each rank holds (contiguous and zigzag layouts), and sharding by them.
#include <cstddef>
#include <string>

#include "attnkit/dist.hpp"
#include "attnkit/error.hpp"

namespace attnkit::dist {

const char* layout_name(Layout layout) noexcept {
  return layout == Layout::zigzag ? "zigzag" : "contiguous";
}

namespace {

void check_layout_args(std::int64_t global_length, int rank, int ranks) {
  if (ranks < 1 || rank < 0 || rank >= ranks) {
    throw Error(ErrorCode::invalid_argument, "rank " + std::to_string(rank) + " of " + std::to_string(ranks) +
                                                 " ranks: need ranks >= 1 and 0 <= rank < ranks");
  }
  if (global_length < 0) {
    throw Error(ErrorCode::invalid_argument, "global length " + std::to_string(global_length) + " is negative");
  }
}

// Chunk c of `count` chunks over N positions: the first N mod count chunks are one longer.
Chunk global_chunk(std::int64_t N, std::int64_t count, std::int64_t c) {
  const std::int64_t base = N / count, extra = N % count;
  return {c * base + (c < extra ? c : extra), base + (c < extra ? 1 : 0), 0};
}

}  // namespace

std::vector<Chunk> chunks(Layout layout, std::int64_t global_length, int rank, int ranks) {
  check_layout_args(global_length, rank, ranks);
  std::vector<std::int64_t> ids{rank};
  std::int64_t count = ranks;
  if (layout == Layout::zigzag) {
    count = 2 * std::int64_t{ranks};
    ids.push_back(count - 1 - rank);  // the mirror chunk: early and late positions pair up under causal
  }
  std::vector<Chunk> result;
  std::int64_t local = 0;
  for (std::int64_t id : ids) {
    Chunk c = global_chunk(global_length, count, id);
    c.local_start = local;
    local += c.length;
    result.push_back(c);
  }
  return result;
}

std::int64_t local_length(Layout layout, std::int64_t global_length, int rank, int ranks) {
  std::int64_t n = 0;
  for (const Chunk& c : chunks(layout, global_length, rank, ranks)) n += c.length;
  return n;
}

std::vector<std::int64_t> global_positions(Layout layout, std::int64_t global_length, int rank, int ranks) {
  std::vector<std::int64_t> positions;
  for (const Chunk& c : chunks(layout, global_length, rank, ranks))
    for (std::int64_t i = 0; i < c.length; ++i) positions.push_back(c.global_start + i);
  return positions;
}

namespace {

// Copies rows of a [B, H, S] or [B, H, S, d] view: dst row dst_start + i = src row src_start + i.
template <class Dst, class Src>
void copy_rows(Dst dst, std::int64_t dst_start, Src src, std::int64_t src_start, std::int64_t rows) {
  const std::int64_t width = src.rank() == 4 ? src.size(3) : 1;
  const std::int64_t elem = static_cast<std::int64_t>(dtype_size(src.dtype()));
  const auto offset = [](auto view, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t c) {
    std::int64_t o = b * view.stride(0) + h * view.stride(1) + i * view.stride(2);
    return view.rank() == 4 ? o + c * view.stride(3) : o;
  };
  for (std::int64_t b = 0; b < src.size(0); ++b)
    for (std::int64_t h = 0; h < src.size(1); ++h)
      for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t c = 0; c < width; ++c) {
          const auto* from = static_cast<const std::byte*>(src.data()) + offset(src, b, h, src_start + i, c) * elem;
          auto* to = static_cast<std::byte*>(dst.data()) + offset(dst, b, h, dst_start + i, c) * elem;
          for (std::int64_t k = 0; k < elem; ++k) to[k] = from[k];
        }
}

void check_sharded_rank(const char* name, int rank, const std::string& shape) {
  if (rank != 3 && rank != 4) {
    throw Error(ErrorCode::invalid_shape, std::string(name) + ": expected rank 3 [B, H, S] or 4 [B, H, S, d], got " + shape);
  }
}

}  // namespace

Tensor shard(ConstTensorView full, Layout layout, int rank, int ranks) {
  check_sharded_rank("shard: full", full.rank(), full.shape_string());
  std::vector<std::int64_t> shape(full.sizes().begin(), full.sizes().begin() + full.rank());
  shape[2] = local_length(layout, full.size(2), rank, ranks);
  Tensor local(full.dtype(), shape);
  for (const Chunk& c : chunks(layout, full.size(2), rank, ranks))
    copy_rows(local.view(), c.local_start, full, c.global_start, c.length);
  return local;
}

void unshard(ConstTensorView local, TensorView full, Layout layout, int rank, int ranks) {
  check_sharded_rank("unshard: local", local.rank(), local.shape_string());
  const std::int64_t expected = local_length(layout, full.rank() >= 3 ? full.size(2) : 0, rank, ranks);
  bool same = full.rank() == local.rank() && full.dtype() == local.dtype() && local.size(2) == expected;
  for (int d = 0; same && d < local.rank(); ++d) same = d == 2 || local.size(d) == full.size(d);
  if (!same) {
    throw Error(ErrorCode::invalid_shape,
                "unshard: local " + local.shape_string() + " (" + std::string(dtype_name(local.dtype())) +
                    ") does not fit rank " + std::to_string(rank) + " of " + std::to_string(ranks) + " in full " +
                    full.shape_string() + " (" + std::string(dtype_name(full.dtype())) + ") under the " +
                    layout_name(layout) + " layout, which gives it " + std::to_string(expected) + " rows");
  }
  for (const Chunk& c : chunks(layout, full.size(2), rank, ranks))
    copy_rows(full, c.global_start, local, c.local_start, c.length);
}

}  // namespace attnkit::dist
