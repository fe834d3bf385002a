// Internal declarations shared by the attnkit tool's command files (not a public header).
#pragma once

#include <functional>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

namespace attnkit::cli {

// Process exit codes (documented in cli.hpp).
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;  // attnkit::Error from the library, a file error
inline constexpr int kExitUsage = 2;  // unknown flag, missing flag, malformed value

// A command receives the words after its name.
using CommandArgs = std::vector<std::string>;

int explain_command(const CommandArgs& args, std::ostream& out, std::ostream& err);
int run_command(const CommandArgs& args, std::ostream& out, std::ostream& err);
int heatmap_command(const CommandArgs& args, std::ostream& out, std::ostream& err);
int lab_command(const CommandArgs& args, std::ostream& out, std::ostream& err);
int bench_command(const CommandArgs& args, std::ostream& out, std::ostream& err);
int info_command(const CommandArgs& args, std::ostream& out, std::ostream& err);

// Runs `body` and turns what it throws into the exit-code convention: UsageError prints
// "attnkit <command>: <message>" and a hint to run --help, returns 2; attnkit::Error prints
// "attnkit <command>: <message> [<code name>]", returns 1; any other std::exception returns 1.
int guarded(std::string_view command, std::ostream& err, const std::function<int()>& body);

}  // namespace attnkit::cli
