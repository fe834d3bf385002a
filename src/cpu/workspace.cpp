#include "cpu/workspace.hpp"

#include <cstring>
#include <string>

#include "attnkit/error.hpp"

namespace attnkit::cpu {

void ForwardWorkspace::reserve(std::size_t bytes) {
  if (bytes <= capacity_) return;
  std::byte* p = static_cast<std::byte*>(std::aligned_alloc(kAlignment, aligned(bytes)));
  if (p == nullptr) {
    throw Error(ErrorCode::out_of_memory, "fast kernel: cannot allocate a " + std::to_string(bytes) +
                                              "-byte workspace");
  }
  std::memset(p, 0, aligned(bytes));  // touch every page once, here, not in the hot loop
  buffer_.reset(p);
  capacity_ = aligned(bytes);
}

ForwardWorkspace& thread_workspace() {
  thread_local ForwardWorkspace workspace;
  return workspace;
}

}  // namespace attnkit::cpu
