// `attnkit info`: what this build of attnkit will run on this machine.
#include <ostream>
#include <string>

#include "args.hpp"
#include "attnkit/attention.hpp"
#include "attnkit/targets.hpp"
#include "commands.hpp"

namespace attnkit::cli {
namespace {

constexpr const char* kHelp = R"(Usage: attnkit info

Prints the attnkit version, the kernel each dtype runs on, the SIMD targets compiled into this build
and those this CPU can run, the target in use (ATTNKIT_TARGET=<name> forces one) and the thread
count (ATTNKIT_NUM_THREADS=<n> sets it).

Example:
  ATTNKIT_TARGET=scalar attnkit info
)";

constexpr FlagSpec kFlags[] = {{"help", false}};

std::string target_list(const std::vector<Target>& targets) {
  std::string out;
  for (Target t : targets) out += (out.empty() ? "" : ", ") + std::string(target_name(t));
  return out;
}

int info(const CommandArgs& words, std::ostream& out) {
  const Args args = Args::parse(words, kFlags);
  if (args.has("help")) {
    out << kHelp;
    return kExitOk;
  }
  out << "attnkit " << version() << '\n'
      << "kernels:           f32, f16, bf16 -> " << kernel_name(resolve_kernel(Kernel::automatic, DType::f32))
      << "; f64 -> " << kernel_name(resolve_kernel(Kernel::automatic, DType::f64)) << " (forward and backward)\n"
      << "targets compiled:  " << target_list(compiled_targets()) << '\n'
      << "targets supported: " << target_list(supported_targets()) << '\n'
      << "target in use:     " << target_name(active_target()) << '\n'
      << "threads:           " << num_threads() << '\n';
  return kExitOk;
}

}  // namespace

int info_command(const CommandArgs& args, std::ostream& out, std::ostream& err) {
  return guarded("info", err, [&] { return info(args, out); });
}

}  // namespace attnkit::cli
