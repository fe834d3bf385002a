// The attnkit tool's entry point: picks the command, handles --help and --version, and maps
// failures to exit codes (0 success, 1 library or file error, 2 bad usage).
#include "cli.hpp"

#include <exception>
#include <new>
#include <ostream>
#include <string>
#include <string_view>

#include "value_parsers.hpp"
#include "attnkit/attention.hpp"
#include "attnkit/error.hpp"
#include "commands.hpp"

namespace attnkit::cli {

namespace {

using CommandFn = int (*)(const CommandArgs&, std::ostream&, std::ostream&);

struct Command {
  std::string_view name;
  std::string_view summary;
  CommandFn fn;
};

// Every command, in the order `attnkit --help` lists them.
constexpr Command kCommands[] = {
    {"explain", "walk through attention for one query, step by step", explain_command},
    {"run", "compute attention on .npy files with any options", run_command},
    {"heatmap", "draw attention weights as a PNG, a heatmap per head (--demo: an example)", heatmap_command},
    {"lab", "experiments with numbers: the 1/√d_k scaling, each kernel's precision", lab_command},
    {"bench", "time the kernels against this machine's ceilings and two baselines", bench_command},
    {"info", "show the kernels, SIMD targets and threads this build uses here", info_command},
};

constexpr std::size_t kSummaryColumn = 12;  // command names are padded to this width in the listing

void print_usage(std::ostream& out) {
  out << "Usage: attnkit <command> [flags]\n"
         "       attnkit --help | --version\n\n"
         "Exact scaled dot-product attention on CPUs: O = softmax(Q·Kᵀ · scale + bias) · V.\n\n"
         "Commands:\n";
  for (const Command& c : kCommands) {
    const std::size_t pad = c.name.size() < kSummaryColumn ? kSummaryColumn - c.name.size() : 1;
    out << "  " << c.name << std::string(pad, ' ') << c.summary << '\n';
  }
  out << "\nRun 'attnkit <command> --help' for the flags of a command.\n\n"
         "Examples:\n"
         "  attnkit explain\n"
         "  attnkit run --q q.npy --k k.npy --v v.npy --out o.npy --causal top-left\n"
         "  attnkit heatmap --demo --out heatmap-demo.png\n"
         "  attnkit lab scaling --plot scaling.png\n"
         "  attnkit bench --quick\n\n"
         "Exit codes: 0 success, 1 a library or file error, 2 bad usage.\n";
}

int usage_error(std::ostream& err, const std::string& message) {
  err << "attnkit: " << message << "\nRun 'attnkit --help' for usage.\n";
  return kExitUsage;
}

}  // namespace

int guarded(std::string_view command, std::ostream& err, const std::function<int()>& body) {
  try {
    return body();
  } catch (const UsageError& e) {
    err << "attnkit " << command << ": " << e.what() << "\nRun 'attnkit " << command << " --help' for usage.\n";
    return kExitUsage;
  } catch (const Error& e) {
    err << "attnkit " << command << ": " << e.what() << " [" << error_code_name(e.code()) << "]\n";
    return kExitError;
  } catch (const std::bad_alloc&) {  // the sizes asked for more memory than there is: say so in words
    err << "attnkit " << command << ": out of memory: the sizes asked for need more memory than this machine "
        << "can give; try smaller ones [" << error_code_name(ErrorCode::out_of_memory) << "]\n";
    return kExitError;
  } catch (const std::exception& e) {
    err << "attnkit " << command << ": " << e.what() << '\n';
    return kExitError;
  }
}

int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (args.empty()) {
    print_usage(err);
    return kExitUsage;
  }
  const std::string& first = args.front();
  if (first == "--help" || first == "-h") {
    print_usage(out);
    return kExitOk;
  }
  if (first == "--version") {
    out << "attnkit " << version() << '\n';
    return kExitOk;
  }
  const CommandArgs rest(args.begin() + 1, args.end());
  for (const Command& c : kCommands) {
    if (first == c.name) return c.fn(rest, out, err);
  }
  if (first.starts_with('-')) return usage_error(err, "unknown option '" + first + "'");
  return usage_error(err, "unknown command '" + first + "'");
}

}  // namespace attnkit::cli
