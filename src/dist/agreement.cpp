// The agreement check (see agreement.hpp). An all-gather of whole signatures rather than an
// all-reduce of one hash: it costs the same single collective for any realistic P, and lets every
// rank say which field differs and on which ranks.
#include "dist/agreement.hpp"

#include <cstring>

#include "attnkit/dist.hpp"
#include "attnkit/dtype.hpp"

namespace attnkit::dist::detail {

const char* field_name(int field) noexcept {
  switch (field) {
    case kOperation: return "the operation (ring_forward or ring_backward)";
    case kBatch: return "the batch size B";
    case kQueryHeads: return "the query heads Hq";
    case kKvHeads: return "the key/value heads Hkv";
    case kHeadDimK: return "the head size d_k";
    case kHeadDimV: return "the value head size d_v";
    case kDType: return "the dtype";
    case kLayout: return "the layout";
    case kCausal: return "options.causal";
    case kScaleBits: return "options.scale";
    case kSoftcapBits: return "options.softcap";
    case kKeyLengthsCount: return "the number of key_lengths";
    case kKeyLengthsHash: return "the key_lengths values";
    case kLocalLength: return "the local length";
    default: return "?";
  }
}

std::int64_t hash_values(const std::int64_t* values, std::size_t count) noexcept {
  constexpr std::uint64_t kFnvOffset = 1469598103934665603ull, kFnvPrime = 1099511628211ull;
  std::uint64_t h = kFnvOffset;
  for (std::size_t i = 0; i < count; ++i)
    for (int byte = 0; byte < 8; ++byte) {
      h ^= (static_cast<std::uint64_t>(values[i]) >> (8 * byte)) & 0xffu;
      h *= kFnvPrime;
    }
  std::int64_t result;
  std::memcpy(&result, &h, sizeof result);
  return result;
}

namespace {

// A field's value as a person reads it.
std::string show(int field, std::int64_t value) {
  if (field == kDType) return std::string(dtype_name(static_cast<DType>(value)));
  if (field == kLayout) return layout_name(static_cast<Layout>(value));
  if (field == kOperation) return value == 0 ? "ring_forward" : "ring_backward";
  if (field == kCausal) return value == 0 ? "none" : "top_left";
  if (field == kScaleBits || field == kSoftcapBits) {
    double x;
    std::memcpy(&x, &value, sizeof x);
    return field == kScaleBits && value == 0 ? "default" : std::to_string(x);
  }
  return std::to_string(value);
}

}  // namespace

std::vector<std::int64_t> agree(MPI_Comm comm, const std::string& op, const Signature& mine,
                                const std::optional<Error>& local_error) {
  constexpr int kWidth = kFieldCount + 1;
  std::array<std::int64_t, kWidth> packed{};
  std::copy(mine.fields.begin(), mine.fields.end(), packed.begin());
  packed[kFieldCount] = mine.local_error;
  int ranks = 0;
  MPI_Comm_size(comm, &ranks);
  std::vector<std::int64_t> all(static_cast<std::size_t>(ranks) * kWidth);
  MPI_Allgather(packed.data(), kWidth, MPI_INT64_T, all.data(), kWidth, MPI_INT64_T, comm);
  const auto at = [&](int rank, int field) { return all[static_cast<std::size_t>(rank) * kWidth + static_cast<std::size_t>(field)]; };

  if (local_error) throw *local_error;
  for (int r = 0; r < ranks; ++r) {
    if (at(r, kFieldCount) >= 0) {
      throw Error(static_cast<ErrorCode>(at(r, kFieldCount)),
                  op + ": rank " + std::to_string(r) + " rejected its arguments (its error says why); no rank ran");
    }
  }
  for (int f = 0; f < kFieldCount; ++f) {
    if (f == kLocalLength) continue;  // may differ; the layout check follows
    for (int r = 1; r < ranks; ++r) {
      if (at(r, f) != at(0, f)) {
        throw Error(ErrorCode::invalid_argument,
                    op + ": ranks disagree on " + field_name(f) + ": rank 0 has " + show(f, at(0, f)) +
                        ", rank " + std::to_string(r) + " has " + show(f, at(r, f)) +
                        " (every rank must pass the same shapes except the local length, and the same options)");
      }
    }
  }
  std::vector<std::int64_t> lengths(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) lengths[static_cast<std::size_t>(r)] = at(r, kLocalLength);
  return lengths;
}

}  // namespace attnkit::dist::detail
