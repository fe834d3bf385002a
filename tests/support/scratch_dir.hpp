// A fresh directory for one test's files, removed with everything in it when the test ends.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <random>
#include <string>
#include <system_error>
#include <vector>

namespace attnkit::testing {

// <system temporary directory>/<prefix>_<test name>_<random>_<count>: unique across the tests of a
// run and across runs in parallel (ctest -j), so no test sees another's files.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix) {
    static std::atomic<int> counter{0};
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           (prefix + "_" + std::string(test ? test->name() : "x") + "_" + std::to_string(std::random_device{}()) +
            "_" + std::to_string(counter++));
    std::filesystem::create_directories(dir_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  std::string path() const { return dir_.string(); }
  // The names of what the directory holds, sorted.
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  std::filesystem::path dir_;
};

}  // namespace attnkit::testing
