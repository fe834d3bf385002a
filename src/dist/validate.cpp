// Validation of a ring call: local arguments first (recorded, not thrown, so that every rank still
// joins the agreement check), then what only the ranks together can check.
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "core/option_checks.hpp"
#include "dist/agreement.hpp"
#include "dist/problem.hpp"

namespace attnkit::dist::detail {

std::int64_t RingProblem::max_length() const {
  std::int64_t m = 0;
  for (std::int64_t n : lengths) m = std::max(m, n);
  return m;
}

namespace {

[[noreturn]] void fail(ErrorCode code, const std::string& op, const std::string& message) {
  throw Error(code, op + ": " + message);
}

std::int64_t size_or(ConstTensorView t, int dim) { return t.rank() > dim ? t.size(dim) : -1; }

std::string shape_list(std::initializer_list<std::int64_t> sizes) {
  std::string s = "[";
  for (auto it = sizes.begin(); it != sizes.end(); ++it) s += (it == sizes.begin() ? "" : ", ") + std::to_string(*it);
  return s + "]";
}

// `name` must have exactly `sizes` and `dtype`, and memory when it has elements.
void expect(const std::string& op, const char* name, ConstTensorView t, std::initializer_list<std::int64_t> sizes,
            DType dtype, const char* why) {
  bool ok = t.rank() == static_cast<int>(sizes.size());
  int d = 0;
  for (std::int64_t s : sizes) ok = ok && t.size(d++) == s;
  if (!ok) {
    fail(ErrorCode::invalid_shape, op, std::string(name) + ": expected shape " + shape_list(sizes) + " (" + why +
                                           "), got " + t.shape_string());
  }
  if (t.dtype() != dtype) {
    fail(ErrorCode::invalid_dtype, op, std::string(name) + ": expected dtype " + std::string(dtype_name(dtype)) +
                                           ", got " + std::string(dtype_name(t.dtype())));
  }
  if (t.data() == nullptr && t.numel() > 0) fail(ErrorCode::null_pointer, op, std::string(name) + " has no data");
}

void check_options(const std::string& op, const AttentionOptions& o) {
  const auto refuse = [&](const char* what, const char* why) {
    fail(ErrorCode::unsupported, op, std::string(what) + " is not supported across ranks: " + why);
  };
  if (o.mask) refuse("options.mask", "a global [N, N] mask is the memory ring attention exists to avoid");
  if (o.window.left != -1 || o.window.right != -1)
    refuse("options.window", "it needs per-block offsets and distance-based block skipping (not implemented)");
  if (!o.alibi_slopes.empty()) refuse("options.alibi_slopes", "the bias depends on global distances, which a block call cannot see");
  if (!o.sinks.empty()) refuse("options.sinks", "the sink joins each row's softmax once, after every block's partial (not implemented)");
  if (o.dropout_p != 0.0) refuse("options.dropout_p", "the dropout stream is keyed by indices that would be local to each block");
  if (o.kernel == Kernel::reference)
    refuse("Kernel::reference", "its backward renormalises over each block's keys, which is wrong for a partial block");
}

// The scalar options, by the checks every front end shares (core/option_checks.hpp), named as
// options.<field>. The blocks run on the fast kernel in float32, so the float32 range is checked
// here, once: the block steps do not check again.
void check_shared_options(const std::string& op, const AttentionOptions& o, const attnkit::detail::Sizes& sizes, DType dtype) {
  try {
    const double scale = attnkit::detail::resolve_scale(o, sizes);
    attnkit::detail::check_scalar_options(o, sizes);
    attnkit::detail::check_float32_range(o, scale, dtype, "");
  } catch (const Error& e) {
    fail(e.code(), op, std::string("options.") + e.what());
  }
}

void check_local(const std::string& op, const RingArgs& a, const RingOptions& options) {
  const DType dtype = a.q.dtype();
  if (dtype == DType::f64) {
    fail(ErrorCode::invalid_dtype, op, "q: f64 is not supported (ring attention computes in float32 with the fast "
                                       "kernel, which would silently drop f64's precision); use f32");
  }
  if (!is_floating(dtype)) fail(ErrorCode::invalid_dtype, op, "q: expected f32, f16 or bf16, got " + std::string(dtype_name(dtype)));
  if (a.q.rank() != 4) fail(ErrorCode::invalid_shape, op, "q: expected rank 4 [B, Hq, n_local, d_k], got " + a.q.shape_string());
  if (a.k.rank() != 4) fail(ErrorCode::invalid_shape, op, "k: expected rank 4 [B, Hkv, n_local, d_k], got " + a.k.shape_string());
  const std::int64_t B = a.q.size(0), Hq = a.q.size(1), n = a.q.size(2), dk = a.q.size(3), Hkv = a.k.size(1);
  if (Hkv < 1 || Hq % Hkv != 0) {
    fail(ErrorCode::invalid_shape, op, "k: its heads " + std::to_string(Hkv) + " must divide q's heads " + std::to_string(Hq) +
                                           " (q " + a.q.shape_string() + ", k " + a.k.shape_string() + ")");
  }
  const char* self = "local shards of one sequence: q, k and v have the same local length";
  expect(op, "k", a.k, {B, Hkv, n, dk}, dtype, self);
  const std::int64_t dv = size_or(a.v, 3);
  expect(op, "v", a.v, {B, Hkv, n, dv}, dtype, self);
  expect(op, "out", a.out, {B, Hq, n, dv}, dtype, "q's rows with v's head size");
  expect(op, "lse", a.lse, {B, Hq, n}, DType::f32, "one float32 per query row");
  if (a.backward) {
    expect(op, "d_out", a.d_out, {B, Hq, n, dv}, dtype, "like out");
    expect(op, "dq", a.dq, {B, Hq, n, dk}, dtype, "like q");
    expect(op, "dk", a.dk, {B, Hkv, n, dk}, dtype, "like k");
    expect(op, "dv", a.dv, {B, Hkv, n, dv}, dtype, "like v");
  }
  check_options(op, options.attention);
  check_shared_options(op, options.attention, attnkit::detail::Sizes{B, Hq, Hkv, n, n, dk, dv}, dtype);
  const auto& kl = options.attention.key_lengths;
  if (!kl.empty() && static_cast<std::int64_t>(kl.size()) != B) {
    fail(ErrorCode::invalid_shape, op, "options.key_lengths: expected one per batch entry (" + std::to_string(B) +
                                           "), got " + std::to_string(kl.size()));
  }
}

std::int64_t bits_of(double x) {
  std::int64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

}  // namespace

RingProblem make_problem(const char* op_name, MPI_Comm comm, const RingArgs& a, const RingOptions& options) {
  const std::string op = op_name;
  if (comm == MPI_COMM_NULL) fail(ErrorCode::invalid_argument, op, "comm is MPI_COMM_NULL");
  RingProblem p;
  p.op = op;
  p.comm = comm;
  MPI_Comm_rank(comm, &p.rank);
  MPI_Comm_size(comm, &p.ranks);

  std::optional<Error> local_error;
  try {
    check_local(op, a, options);
  } catch (const Error& e) {
    local_error = e;
  }
  const AttentionOptions& o = options.attention;
  Signature sig;
  auto& f = sig.fields;
  f[kOperation] = a.backward ? 1 : 0;
  f[kBatch] = size_or(a.q, 0);
  f[kQueryHeads] = size_or(a.q, 1);
  f[kKvHeads] = size_or(a.k, 1);
  f[kHeadDimK] = size_or(a.q, 3);
  f[kHeadDimV] = size_or(a.v, 3);
  f[kDType] = static_cast<std::int64_t>(a.q.dtype());
  f[kLayout] = static_cast<std::int64_t>(options.layout);
  f[kCausal] = o.causal == Causal::none ? 0 : 1;  // bottom_right equals top_left when n = m globally
  f[kScaleBits] = o.scale ? bits_of(*o.scale) : 0;
  f[kSoftcapBits] = bits_of(o.softcap);
  f[kKeyLengthsCount] = static_cast<std::int64_t>(o.key_lengths.size());
  f[kKeyLengthsHash] = hash_values(o.key_lengths.data(), o.key_lengths.size());
  f[kLocalLength] = size_or(a.q, 2);
  if (local_error) sig.local_error = static_cast<std::int64_t>(local_error->code());
  p.lengths = agree(comm, op, sig, local_error);

  // From here every rank holds the same data, so every rank raises the same error or none.
  for (std::int64_t n : p.lengths) p.N += n;
  for (int r = 0; r < p.ranks; ++r) {
    const std::int64_t want = local_length(options.layout, p.N, r, p.ranks);
    if (p.length(r) != want) {
      std::string all;
      for (std::int64_t n : p.lengths) all += (all.empty() ? "" : ", ") + std::to_string(n);
      fail(ErrorCode::invalid_shape, op, "rank " + std::to_string(r) + " holds " + std::to_string(p.length(r)) +
                                             " rows, but the " + layout_name(options.layout) + " layout of the global length " +
                                             std::to_string(p.N) + " (the sum of the local lengths " + all + ") over " +
                                             std::to_string(p.ranks) + " ranks gives it " + std::to_string(want));
    }
  }
  for (std::size_t b = 0; b < o.key_lengths.size(); ++b) {
    if (o.key_lengths[b] < 0 || o.key_lengths[b] > p.N) {
      fail(ErrorCode::invalid_argument, op, "options.key_lengths[" + std::to_string(b) + "] = " + std::to_string(o.key_lengths[b]) +
                                                " is outside 0..N = " + std::to_string(p.N) + " (the global length)");
    }
  }
  // Ring messages carry MPI int counts; every rank computes the same sizes, so all refuse together.
  const std::int64_t grad_factor = a.backward ? 2 : 1;
  if (grad_factor * f[kBatch] * f[kKvHeads] * p.max_length() * (f[kHeadDimK] + f[kHeadDimV]) > std::numeric_limits<int>::max()) {
    fail(ErrorCode::size_overflow, op, "a K/V block of " + std::to_string(p.max_length()) +
                                           " rows exceeds MPI's int element count per message; use more ranks");
  }
  p.B = f[kBatch];
  p.Hq = f[kQueryHeads];
  p.Hkv = f[kKvHeads];
  p.dk = f[kHeadDimK];
  p.dv = f[kHeadDimV];
  p.layout = options.layout;
  p.resolved.sizes = attnkit::detail::Sizes{p.B, p.Hq, p.Hkv, p.N, p.N, p.dk, p.dv};
  p.resolved.kernel = Kernel::fast;
  p.resolved.target = active_target();
  p.resolved.take_options(o, attnkit::detail::resolve_scale(o, p.resolved.sizes));  // checked above
  return p;
}

}  // namespace attnkit::dist::detail
