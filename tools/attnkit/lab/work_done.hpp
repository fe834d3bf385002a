// How a lab experiment reports progress: called with units of work as they finish, so that the
// command can drive a progress bar while the experiment stays free of any output.
#pragma once

#include <functional>

namespace attnkit::lab {

using WorkDone = std::function<void(double units)>;

}  // namespace attnkit::lab
