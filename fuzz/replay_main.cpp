// Runs a fuzz target's LLVMFuzzerTestOneInput on saved inputs, without libFuzzer: the seed corpus
// and the regression inputs of fuzz/ become ordinary tests in every build (GCC has no libFuzzer).
//
//   fuzz_replay_npy fuzz/corpus/npy fuzz/regressions/npy one_more_input.npy
//
// Arguments are files or directories (their files, sorted; names starting with '.' are skipped).
// Each input's name is printed before it runs, so that a crash names the input that caused it.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

namespace fs = std::filesystem;

std::vector<fs::path> inputs_in(const fs::path& path) {
  if (!fs::is_directory(path)) return {path};
  std::vector<fs::path> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(path)) {
    if (entry.is_regular_file() && !entry.path().filename().string().starts_with('.')) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE_OR_DIRECTORY...\n", argv[0]);
    return 2;
  }
  std::size_t count = 0;
  for (int a = 1; a < argc; ++a) {
    std::error_code error;
    if (!fs::exists(argv[a], error)) {
      std::fprintf(stderr, "replay: %s does not exist\n", argv[a]);
      return 1;
    }
    for (const fs::path& file : inputs_in(argv[a])) {
      std::printf("replay: %s\n", file.c_str());
      std::fflush(stdout);  // before the input runs, in case it crashes
      std::ifstream in(file, std::ios::binary);
      const std::vector<char> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
      if (!in.eof() && in.fail()) {
        std::fprintf(stderr, "replay: cannot read %s\n", file.c_str());
        return 1;
      }
      // A copy of exactly the input's size, never a null pointer (even when empty), as libFuzzer
      // passes it: a read past the end is caught by AddressSanitizer.
      const std::unique_ptr<std::uint8_t[]> data(new std::uint8_t[bytes.size()]);
      std::copy(bytes.begin(), bytes.end(), data.get());
      LLVMFuzzerTestOneInput(data.get(), bytes.size());
      ++count;
    }
  }
  std::printf("replay: %zu inputs, no finding\n", count);
  return 0;
}
