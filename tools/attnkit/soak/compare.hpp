// What the soak run compares: outputs poisoned with NaN before a call, and errors against the
// reference normalised so that one bound per dtype holds for every shape.
#pragma once

#include <cstdint>
#include <vector>

#include "attnkit/tensor.hpp"

namespace attnkit::cli::soak {

// Every element NaN, so an element a kernel forgets to write shows up.
void poison(Tensor& t);
Tensor poisoned(DType dtype, std::vector<std::int64_t> shape);
bool all_nan(const Tensor& t);

double max_abs(const Tensor& t);

// Largest |a − b| / scale over the elements where b is finite; infinite when a is not finite where
// b is (an unwritten element, or a NaN from finite inputs).
double normalised_error(const Tensor& a, const Tensor& b, double scale);

// A gradient's error, judged by its own size as the unit tests judge it: normalised_error over
// max(1, the largest |reference element|). The floor of 1 (the soak's inputs are N(0, 1)) covers a
// gradient that cancels to nearly zero and keeps the rounding of the terms it cancels.
double gradient_error(const Tensor& got, const Tensor& reference);

// LSE: −inf exactly where the reference has it (rows with no visible key); elsewhere the largest
// |a − b| / max(1, |b|).
double lse_error(const Tensor& a, const Tensor& b);

}  // namespace attnkit::cli::soak
