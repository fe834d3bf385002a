// The checks of AttentionOptions' scalars that every front end applies (the plain calls, attend,
// the module through them, ring attention), written once with one set of messages, such as
// "scale: must be finite and > 0, got -1". Each raises Error(invalid_argument).
#pragma once

#include <string>

#include "attnkit/attention.hpp"
#include "core/problem.hpp"

namespace attnkit::detail {

// x as argument messages print it ("%g": 0.125, 1e+300, nan).
std::string number_text(double x);

// The scale the call uses: options.scale, checked, or 1/sqrt(d_k).
double resolve_scale(const AttentionOptions& o, const Sizes& s);

// softcap, dropout_p, window, and that causal and kernel hold values of their enums; s bounds the
// indices the dropout stream can count.
void check_scalar_options(const AttentionOptions& o, const Sizes& s);

// For calls that compute in float32 (the fast kernel): a scale past float32's largest value would
// become inf there, and a softcap outside the normal floats inf or 0, where the float64 reference
// would use the values as given. `way_out` ends the message ("" for none).
void check_float32_range(const AttentionOptions& o, double scale, DType dtype, const char* way_out);

}  // namespace attnkit::detail
