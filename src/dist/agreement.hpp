// The agreement check: before any ring traffic, every rank learns every other rank's view of the
// call, so that a mismatch raises the same Error everywhere instead of leaving a rank blocked in a
// receive that never comes.
#pragma once

#include <mpi.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attnkit/error.hpp"

namespace attnkit::dist::detail {

// What the ranks must agree on, one 64-bit field each, plus the rank's own local length (which may
// differ). Field names appear in the error messages.
enum Field : int {
  kOperation, kBatch, kQueryHeads, kKvHeads, kHeadDimK, kHeadDimV, kDType, kLayout, kCausal,
  kScaleBits, kSoftcapBits, kKeyLengthsCount, kKeyLengthsHash, kLocalLength, kFieldCount
};
const char* field_name(int field) noexcept;

struct Signature {
  std::array<std::int64_t, kFieldCount> fields{};
  // A rank that rejected its own arguments still takes part in the exchange, with its error code
  // (−1: none), so the others raise too rather than wait for it.
  std::int64_t local_error = -1;
};

// A 64-bit FNV-1a hash of a sequence of integers (the key_lengths values).
std::int64_t hash_values(const std::int64_t* values, std::size_t count) noexcept;

// Exchanges signatures over `comm` (one MPI_Allgather: P × 16 integers). Throws, on every rank, the
// local error if this rank has one, else Error(code of the failing rank) if another rank rejected
// its arguments, else Error(invalid_argument) naming the first field on which ranks differ.
// Returns every rank's local length.
std::vector<std::int64_t> agree(MPI_Comm comm, const std::string& op, const Signature& mine,
                                const std::optional<Error>& local_error);

}  // namespace attnkit::dist::detail
