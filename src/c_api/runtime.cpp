// The C API's runtime settings: version, threads, SIMD target, memory budget.
#include <cstring>
#include <optional>
#include <string>

#include "attnkit/attention.hpp"
#include "attnkit/attnkit.h"
#include "attnkit/error.hpp"
#include "attnkit/memory.hpp"
#include "attnkit/targets.hpp"
#include "c_api/descriptors.hpp"
#include "c_api/status.hpp"

using attnkit::c_api::guarded;
using attnkit::c_api::not_null;

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
    const std::optional<attnkit::Target> target = attnkit::target_from_name(name);
    if (!target) {
      throw attnkit::Error(attnkit::ErrorCode::invalid_argument, std::string("target: '") + name +
                                                                     "' is not a target (" + attnkit::target_names() +
                                                                     ", or default)");
    }
    attnkit::set_target(*target);
  });
}

attnkit_status attnkit_active_target(const char** name) {
  return guarded([&] {
    *not_null(name, "name") = attnkit::target_name(attnkit::active_target());
  });
}

attnkit_status attnkit_set_memory_limit(uint64_t bytes) {
  return guarded([&] { attnkit::set_memory_limit(bytes); });
}

}  // extern "C"
