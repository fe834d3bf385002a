// `attnkit info`: what this build of attnkit will run on this machine.
#include <algorithm>
#include <ostream>
#include <string>

#include "attnkit/attention.hpp"
#include "attnkit/targets.hpp"
#include "command_line.hpp"
#include "commands.hpp"

namespace attnkit::cli {
namespace {

constexpr const char* kAbout = R"(Usage: attnkit info

Prints the attnkit version, the kernel each dtype runs on, the SIMD targets compiled into this build
and those this CPU can run (for each one it cannot, the CPU feature it lacks), the target in use and
why it is the default (ATTNKIT_TARGET=<name> forces one), how that target multiplies bf16 inputs
(f32 FMA, bf16 dot products with P rounded to bf16, or AMX tiles), and the thread count
(ATTNKIT_NUM_THREADS=<n> sets it). Targets ending in _emulated are test stand-ins for the AVX-512
and AMX ones on any AVX2 CPU.

)";

constexpr const char* kFooter = R"(Examples:
  attnkit info
  ATTNKIT_TARGET=scalar attnkit info
  ATTNKIT_TARGET=avx512_bf16 attnkit info)";

std::string target_list(const std::vector<Target>& targets) {
  std::string out;
  for (Target t : targets) out += (out.empty() ? "" : ", ") + std::string(target_name(t));
  return out;
}

// How a target multiplies bf16 inputs, for the info line.
std::string bf16_products(Target target) {
  if (!target_uses_tiles(target)) {
    return target_uses_bf16_dot(target) ? "bf16 dot products (vdpbf16ps), forward and backward; P (and the backward's dS) "
                                          "rounded to bf16 before they multiply"
                                        : "widened to f32, f32 FMA";
  }
  const std::string bf16 = "AMX tiles (tdpbf16ps), forward and backward; P (and the backward's dS) rounded to bf16 before "
                           "they multiply; ";
  if (target_uses_f16_tiles(target)) {
    return bf16 + "the f16 forward on the tiles too (tdpfp16ps, P rounded to f16); the f16 backward, f32 inputs and "
                  "quantized caches run on " + target_name(tile_vector_target(target));
  }
  return bf16 + "f32 and f16 inputs and quantized caches run on " + target_name(tile_vector_target(target));
}

int info(const CommandArgs& words, std::ostream& out) {
  CommandLine command_line(kAbout, kFooter);
  if (!command_line.parse(words, out)) return kExitOk;  // --help
  const Target active = active_target();
  out << "attnkit " << version() << '\n'
      << "kernels:           f32, f16, bf16 -> " << kernel_name(resolve_kernel(Kernel::automatic, DType::f32))
      << "; f64 -> " << kernel_name(resolve_kernel(Kernel::automatic, DType::f64)) << " (forward and backward)\n"
      << "targets compiled:  " << target_list(compiled_targets()) << '\n'
      << "targets supported: " << target_list(supported_targets()) << '\n';
  const std::vector<Target> supported = supported_targets();
  for (Target t : compiled_targets()) {
    if (std::find(supported.begin(), supported.end(), t) == supported.end())
      out << "  not on this CPU:  " << target_name(t) << " (lacks " << missing_cpu_feature(t) << ")\n";
  }
  out << "target in use:     " << target_name(active) << '\n'
      << "default target:    " << default_target_reason() << '\n'
      << "bf16 products:     " << bf16_products(active) << '\n'
      << "threads:           " << num_threads() << '\n';
  return kExitOk;
}

}  // namespace

int info_command(const CommandArgs& args, std::ostream& out, std::ostream& err) {
  return guarded("info", err, [&] { return info(args, out); });
}

}  // namespace attnkit::cli
