// Which SIMD target the fast kernels run: detection, ATTNKIT_TARGET, and forcing by the caller.
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <atomic>
#include <cstdlib>
#include <string>
#include <string_view>

#include "attnkit/error.hpp"
#include "attnkit/targets.hpp"

namespace attnkit {
namespace {

constexpr Target kAllTargets[] = {Target::avx2, Target::scalar};  // best first
constexpr int kNoForcedTarget = -1;

std::atomic<int> g_forced_target{kNoForcedTarget};

#if defined(__x86_64__) || defined(__i386__)
// F16C is read from CPUID (leaf 1, ECX) because Clang before 15 rejects __builtin_cpu_supports("f16c").
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
#endif

bool cpu_supports(Target target) {
  switch (target) {
    case Target::scalar: return true;
    case Target::avx2:
#if defined(__x86_64__) || defined(__i386__)
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
#else
      return false;
#endif
  }
  return false;
}

bool compiled(Target target) {
#if defined(__x86_64__) || defined(__i386__)
  (void)target;
  return true;
#else
  return target == Target::scalar;
#endif
}

// The target named by ATTNKIT_TARGET, read once; raises for an unknown or unsupported name.
int environment_target() {
  static const int from_env = [] {
    const char* env = std::getenv("ATTNKIT_TARGET");
    if (env == nullptr || *env == '\0') return kNoForcedTarget;
    for (Target t : kAllTargets) {
      if (std::string_view(env) == target_name(t)) return static_cast<int>(t);
    }
    return -2;  // an unknown name: reported by active_target()
  }();
  return from_env;
}

}  // namespace

const char* target_name(Target target) noexcept {
  switch (target) {
    case Target::scalar: return "scalar";
    case Target::avx2: return "avx2";
  }
  return "unknown";
}

std::vector<Target> compiled_targets() {
  std::vector<Target> out;
  for (Target t : kAllTargets)
    if (compiled(t)) out.push_back(t);
  return out;
}

std::vector<Target> supported_targets() {
  std::vector<Target> out;
  for (Target t : kAllTargets)
    if (compiled(t) && cpu_supports(t)) out.push_back(t);
  return out;
}

void set_target(Target target) {
  if (!compiled(target) || !cpu_supports(target)) {
    throw Error(ErrorCode::unsupported, std::string("set_target: this CPU cannot run target ") + target_name(target));
  }
  g_forced_target.store(static_cast<int>(target));
}

void reset_target() { g_forced_target.store(kNoForcedTarget); }

Target active_target() {
  const int forced = g_forced_target.load();
  if (forced != kNoForcedTarget) return static_cast<Target>(forced);
  const int from_env = environment_target();
  if (from_env == -2) {
    throw Error(ErrorCode::invalid_argument, std::string("ATTNKIT_TARGET: unknown target '") +
                                                 std::getenv("ATTNKIT_TARGET") + "' (targets: avx2, scalar)");
  }
  if (from_env != kNoForcedTarget) {
    const auto target = static_cast<Target>(from_env);
    if (!cpu_supports(target)) {
      throw Error(ErrorCode::unsupported,
                  std::string("ATTNKIT_TARGET: this CPU cannot run target ") + target_name(target));
    }
    return target;
  }
  return supported_targets().front();
}

}  // namespace attnkit
