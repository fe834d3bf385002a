// Fuzz target: the .npy reader (attnkit::parse_npy, the parser behind read_npy).
//
// Every input must be accepted or rejected with an attnkit::Error; anything else (a crash, another
// exception, a sanitizer report) is a finding. An accepted file must also be what the format says:
// its data is the input's last nbytes bytes (bools read as 0 or 1), and write_npy then read_npy
// gives the same tensor back.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <span>

#include "attnkit/error.hpp"
#include "attnkit/npy.hpp"
#include "attnkit/tensor.hpp"
#include "fuzz_support.hpp"

namespace {

using attnkit::DType;
using attnkit::Tensor;
using attnkit::fuzz::check;

// The data fills the rest of the file exactly, so it is the input's tail.
void check_data_is_the_tail(const Tensor& t, std::span<const std::byte> input) {
  const std::size_t n = t.nbytes();
  check(n <= input.size(), "npy: an accepted tensor holds more bytes than the file");
  const std::byte* tail = input.data() + (input.size() - n);
  const auto* data = static_cast<const std::byte*>(t.raw());
  if (t.dtype() != DType::boolean) {
    check(n == 0 || std::memcmp(data, tail, n) == 0, "npy: the tensor's bytes are not the file's data");
    return;
  }
  for (std::size_t i = 0; i < n; ++i) {
    check(data[i] == std::byte{tail[i] != std::byte{0}}, "npy: a bool is not read as 0 or 1");
  }
}

void check_round_trip(const Tensor& t) {
  const attnkit::fuzz::ScratchFile file(".npy");
  try {
    attnkit::write_npy(file.path(), t);
  } catch (const attnkit::Error& e) {
    // A shape of very many dimensions may fit the reader's header limit as "(1,1,...)" but not as
    // the "(1, 1, ...)" numpy writes; the writer refuses it rather than write what no reader reads.
    check(e.code() == attnkit::ErrorCode::invalid_shape, "npy: write_npy failed on a tensor read_npy returned",
          e.what());
    return;
  }
  Tensor back;
  try {
    back = attnkit::read_npy(file.path());
  } catch (const std::exception& e) {
    attnkit::fuzz::finding("npy: read_npy refused what write_npy wrote", e.what());
  }
  check(back.dtype() == t.dtype() && back.shape() == t.shape(), "npy: round trip changed the dtype or shape");
  check(t.nbytes() == 0 || std::memcmp(back.raw(), t.raw(), t.nbytes()) == 0, "npy: round trip changed the data");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto input = std::as_bytes(std::span(data, size));
  Tensor t;
  try {
    t = attnkit::parse_npy(input, "fuzz.npy");
  } catch (const attnkit::Error&) {
    return 0;  // rejected with the library's error: the expected outcome for most inputs
  } catch (const std::exception& e) {
    attnkit::fuzz::finding("npy: an exception that is not attnkit::Error", e.what());
  }
  check_data_is_the_tail(t, input);
  check_round_trip(t);
  return 0;
}
