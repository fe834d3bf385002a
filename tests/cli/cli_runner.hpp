// Runs the attnkit tool in-process for the CLI tests, capturing its exit code and both streams.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "cli.hpp"

namespace attnkit::testing {

struct CliResult {
  int code = -1;
  std::string out, err;
};

inline CliResult run_cli(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  CliResult r;
  r.code = attnkit::cli::run(args, out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

}  // namespace attnkit::testing
