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

// Moves the reference's dq and dk to the output the backward was given. The backward computes
// D_i = dO_i · O_i from that output, as FlashAttention's does (bf16 or f16 there), while the reference
// computes D from its exact P and dP. dS_ij = P_ij · (dP_ij − D_i) · f_ij is linear in D (f_ij =
// 1 − tanh²(s_ij / c) under softcap c, else 1), so an output off by δO moves dq_i by
// −scale · δD_i · Σ_j P_ij f_ij k_j and dk_j by −scale · Σ_i P_ij f_ij δD_i q_i, δD_i = dO_i · δO_i:
// exactly, not as a bound. It matters where few keys carry many rows (m = 1: every P is 1, and dk_j
// gathers every row's δD). dv does not read D. Every tensor is float64 and head-major except `out`
// (any dtype): probs [B, Hq, n, m] before dropout, q [B, Hq, n, d_k], k [B, Hkv, m, d_k], d_out and
// both outputs [B, Hq, n, d_v], dq64 like q and dk64 like k.
void move_to_stored_output(Tensor& dq64, Tensor& dk64, const Tensor& out, const Tensor& out64, const Tensor& d_out64,
                           const Tensor& probs64, const Tensor& q64, const Tensor& k64, double scale, double softcap);

// LSE: −inf exactly where the reference has it (rows with no visible key); elsewhere the largest
// |a − b| / max(1, |b|).
double lse_error(const Tensor& a, const Tensor& b);

}  // namespace attnkit::cli::soak
