// The C API's runtime settings: version, threads, SIMD target, memory budget.
#include <cstring>
#include <string>

#include "attnkit/attention.hpp"
#include "attnkit/attnkit.h"
#include "attnkit/error.hpp"
#include "attnkit/memory.hpp"
#include "attnkit/targets.hpp"
#include "c_api/status.hpp"

using attnkit::c_api::guarded;

namespace {

constexpr attnkit::Target kTargets[] = {attnkit::Target::scalar,      attnkit::Target::avx2,
                                        attnkit::Target::avx512,      attnkit::Target::avx512_bf16,
                                        attnkit::Target::avx512_emulated, attnkit::Target::avx512_bf16_emulated};

}  // namespace

extern "C" {

const char* attnkit_version(void) { return attnkit::version(); }

int32_t attnkit_c_api_version(void) { return ATTNKIT_C_API_VERSION; }

attnkit_status attnkit_set_num_threads(int32_t n) {
  return guarded([&] { attnkit::set_num_threads(n); });
}

int32_t attnkit_num_threads(void) { return attnkit::num_threads(); }

attnkit_status attnkit_set_target(const char* name) {
  return guarded([&] {
    if (name == nullptr || std::strcmp(name, "default") == 0) {
      attnkit::reset_target();
      return;
    }
    std::string known;
    for (attnkit::Target target : kTargets) {
      if (std::strcmp(name, attnkit::target_name(target)) == 0) {
        attnkit::set_target(target);
        return;
      }
      known += std::string(known.empty() ? "" : ", ") + attnkit::target_name(target);
    }
    throw attnkit::Error(attnkit::ErrorCode::invalid_argument,
                         std::string("target: '") + name + "' is not a target (" + known + ", or default)");
  });
}

attnkit_status attnkit_active_target(const char** name) {
  return guarded([&] {
    if (name == nullptr) throw attnkit::Error(attnkit::ErrorCode::null_pointer, "name: NULL");
    *name = attnkit::target_name(attnkit::active_target());
  });
}

attnkit_status attnkit_set_memory_limit(uint64_t bytes) {
  return guarded([&] { attnkit::set_memory_limit(bytes); });
}

}  // extern "C"
