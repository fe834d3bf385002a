#include "core/option_checks.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>

#include "attnkit/error.hpp"

namespace attnkit::detail {
namespace {

[[noreturn]] void fail(const std::string& message) { throw Error(ErrorCode::invalid_argument, message); }

}  // namespace

std::string number_text(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", x);
  return text;
}

double resolve_scale(const AttentionOptions& o, const Sizes& s) {
  if (!o.scale) return s.d_k > 0 ? 1.0 / std::sqrt(static_cast<double>(s.d_k)) : 1.0;
  if (!std::isfinite(*o.scale) || *o.scale <= 0) fail("scale: must be finite and > 0, got " + number_text(*o.scale));
  return *o.scale;
}

void check_scalar_options(const AttentionOptions& o, const Sizes& s) {
  if (!std::isfinite(o.softcap) || o.softcap < 0) {
    fail("softcap: must be finite and >= 0 (0 = off), got " + number_text(o.softcap));
  }
  if (!std::isfinite(o.dropout_p) || o.dropout_p < 0 || o.dropout_p >= 1) {
    fail("dropout_p: must be in [0, 1), got " + number_text(o.dropout_p));
  }
  if (o.window.left < -1 || o.window.right < -1) {
    fail("window: left and right must be >= 0, or -1 for unbounded; got (" + std::to_string(o.window.left) + ", " +
         std::to_string(o.window.right) + ")");
  }
  if (o.causal != Causal::none && o.causal != Causal::top_left && o.causal != Causal::bottom_right) {
    fail("causal: not a Causal value");
  }
  if (o.kernel != Kernel::automatic && o.kernel != Kernel::reference && o.kernel != Kernel::fast) {
    fail("kernel: not a Kernel value");
  }
  if (o.dropout_p > 0) {
    // The dropout counter holds batch, head, query and key/4 in 32 bits each (src/core/philox.hpp).
    constexpr std::int64_t kCounterLimit = std::int64_t{1} << 32;
    if (s.batch >= kCounterLimit || s.q_heads >= kCounterLimit || s.n >= kCounterLimit || s.m / 4 >= kCounterLimit) {
      fail("dropout_p: dropout supports batch, heads and sequence lengths below 2^32");
    }
  }
}

// A scale past float32's largest value would become inf (NaN logits where q·k = 0), and a softcap
// outside the normal floats inf or 0 (NaN logits, or the cap silently off); 1/softcap must be
// normal too.
void check_float32_range(const AttentionOptions& o, double scale, DType dtype, const char* way_out) {
  constexpr double kFloat32Max = std::numeric_limits<float>::max();
  constexpr double kFloat32MinNormal = std::numeric_limits<float>::min();
  const std::string why = " is outside float32's range, in which the fast kernel computes " +
                          std::string(dtype_name(dtype)) + " inputs" + way_out;
  if (scale > kFloat32Max) fail("scale: " + number_text(scale) + why);
  if (o.softcap != 0 && (o.softcap < kFloat32MinNormal || o.softcap > 1 / kFloat32MinNormal)) {
    fail("softcap: " + number_text(o.softcap) + why);
  }
}

}  // namespace attnkit::detail
