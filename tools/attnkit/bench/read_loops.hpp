// Loops that read memory as fast as a core can, for the read-bandwidth ceiling (bench/bandwidth.cpp):
// two streams at once (the two halves of the range, as decoding reads K and V), summed into
// independent vector accumulators so that only the loads set the pace; with `ahead` > 0, each stream
// also requests the line `ahead` bytes on into L2 (prefetcht1), as decoding requests its rows. As
// with the compute loops, each ISA's loop lives in its own translation unit compiled with that ISA's
// -m flags; callers check the CPU first. Each returns a sum of what it read, to be kept observable.
#pragma once

#include <cstddef>
#include <cstdint>

namespace attnkit::bench {

// Sums the 64-bit words of [begin, begin + bytes), bytes a multiple of 128 (the bench reads whole
// pages). Lines past the end are never requested.
std::uint64_t read_loop_generic(const std::byte* begin, std::size_t bytes, std::size_t ahead);  // any CPU: 128-bit vectors
#if defined(ATTNKIT_BENCH_X86)
std::uint64_t read_loop_avx2(const std::byte* begin, std::size_t bytes, std::size_t ahead);  // needs avx2
#endif

}  // namespace attnkit::bench
