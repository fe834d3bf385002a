// The attnkit command-line tool, callable in-process (tests drive it this way).
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace attnkit::cli {

// Runs `attnkit <args...>` (args excludes the program name). Normal output goes to `out`, errors to
// `err`. Returns the process exit code: 0 on success, 1 on a library or file error, 2 on bad usage.
int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace attnkit::cli
