// Fuzz target: the .safetensors reader (attnkit::parse_safetensors).
//
// Every input must be accepted or rejected with an attnkit::Error; anything else (a crash, another
// exception, a sanitizer report) is a finding. An accepted file must also be consistent: its
// tensors' bytes fit in the input after the header, and write_safetensors then read_safetensors
// gives the same tensors and metadata back (the header promises that round trip).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <span>
#include <string>

#include "attnkit/error.hpp"
#include "attnkit/safetensors.hpp"
#include "attnkit/tensor.hpp"
#include "fuzz_support.hpp"

namespace {

using attnkit::SafetensorsFile;
using attnkit::Tensor;
using attnkit::fuzz::check;
using attnkit::fuzz::finding;

constexpr std::size_t kLengthBytes = 8;  // the u64 header length that starts every file

// The tensors tile the data buffer, which is what follows the length field and the header.
void check_sizes(const SafetensorsFile& file, std::span<const std::uint8_t> input) {
  check(input.size() >= kLengthBytes, "safetensors: accepted a file shorter than its length field");
  std::uint64_t header = 0;
  for (std::size_t i = kLengthBytes; i-- > 0;) header = (header << 8) | input[i];
  check(header <= input.size() - kLengthBytes, "safetensors: accepted a header longer than the file");
  std::uint64_t data = 0;
  for (const auto& [name, t] : file.tensors) {
    check(t.raw() != nullptr, "safetensors: a tensor without storage", name);
    data += t.nbytes();
  }
  check(data == input.size() - kLengthBytes - header, "safetensors: the tensors do not fill the data buffer exactly");
}

bool same_tensor(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         (a.nbytes() == 0 || std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
}

void check_round_trip(const SafetensorsFile& file) {
  const attnkit::fuzz::ScratchFile scratch(".safetensors");
  try {
    attnkit::write_safetensors(scratch.path(), file);
  } catch (const std::exception& e) {
    finding("safetensors: write_safetensors refused what read_safetensors returned", e.what());
  }
  SafetensorsFile back;
  try {
    back = attnkit::read_safetensors(scratch.path());
  } catch (const std::exception& e) {
    finding("safetensors: read_safetensors refused what write_safetensors wrote", e.what());
  }
  check(back.metadata == file.metadata, "safetensors: round trip changed the metadata");
  check(back.tensors.size() == file.tensors.size(), "safetensors: round trip changed the number of tensors");
  for (const auto& [name, t] : file.tensors) {
    const auto it = back.tensors.find(name);
    check(it != back.tensors.end() && same_tensor(it->second, t), "safetensors: round trip changed tensor", name);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  SafetensorsFile file;
  try {
    file = attnkit::parse_safetensors(std::as_bytes(std::span(data, size)), "fuzz.safetensors");
  } catch (const attnkit::Error&) {
    return 0;  // rejected with the library's error: the expected outcome for most inputs
  } catch (const std::exception& e) {
    finding("safetensors: an exception that is not attnkit::Error", e.what());
  }
  check_sizes(file, std::span(data, size));
  check_round_trip(file);
  return 0;
}
