// `attnkit run`: one attnkit::forward call on .npy files, with every AttentionOptions field as a flag,
// and with --d-out the attnkit::backward call that follows it (same inputs, same options). With
// --cu-seqlens-q and --cu-seqlens-k the files hold packed variable-length batches, and the calls are
// attnkit::varlen_forward and varlen_backward.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "attention_flags.hpp"
#include "command_line.hpp"
#include "attnkit/attention.hpp"
#include "attnkit/error.hpp"
#include "attnkit/npy.hpp"
#include "attnkit/options.hpp"
#include "attnkit/staged_outputs.hpp"
#include "attnkit/tensor.hpp"
#include "attnkit/varlen.hpp"
#include "commands.hpp"

namespace attnkit::cli {

namespace {

constexpr std::string_view kAbout = R"(Usage: attnkit run --q Q.npy --k K.npy --v V.npy --out O.npy [options]
       attnkit run --q Q.npy --k K.npy --v V.npy --d-out dO.npy --dq dQ.npy --dk dK.npy --dv dV.npy [options]

Computes O = softmax(Q·Kᵀ · scale + bias) · V with attnkit::forward on .npy files and, with
--d-out, the gradients of a loss L from dO = ∂L/∂O with attnkit::backward, under the same options.
Q, K and V are floating arrays of the same rank: 4 [B, H, S, D], 3 [H, S, D] or 2 [S, D].
The outputs keep that rank (O [.., n, d_v], LSE [.., n], probabilities [.., n, m], gradients the
shapes of Q, K and V).

)";

constexpr std::string_view kFooter = R"(Examples:
  attnkit run --q q.npy --k k.npy --v v.npy --out o.npy
  attnkit run --q q.npy --k k.npy --v v.npy --out o.npy --causal bottom-right --lse lse.npy
  attnkit run --q q.npy --k k.npy --v v.npy --out o.npy --mask keep.npy --dtype bf16 --kernel reference
  attnkit run --q q.npy --k k.npy --v v.npy --d-out do.npy --dq dq.npy --dk dk.npy --dv dv.npy \
      --causal top-left --dropout 0.1 --seed 7
  attnkit run --q q.npy --k k.npy --v v.npy --out o.npy --cu-seqlens-q 0,5,12 --cu-seqlens-k 0,7,12 \
      --causal bottom-right

Exit codes: 0 success, 1 a library or file error, 2 bad usage.)";

// Everything the flags say, parsed and checked for form before any file is touched.
struct Request {
  std::string q_path, k_path, v_path;
  std::optional<std::string> out_path, lse_path, probs_path;
  std::optional<std::string> d_out_path, dq_path, dk_path, dv_path;  // the backward runs when d_out_path is set
  bool verbose = false;
  AttentionFlags flags;  // options, mask, dtype, threads
  // --cu-seqlens-q and --cu-seqlens-k: the inputs are packed sequences (both set, or neither).
  std::optional<std::vector<std::int64_t>> cu_seqlens_q, cu_seqlens_k;
  bool packed() const { return cu_seqlens_q.has_value(); }
};

// --dq, --dk and --dv need --d-out, and --d-out needs at least one of them.
void check_gradient_flags(const Request& r) {
  const bool any_gradient = r.dq_path || r.dk_path || r.dv_path;
  if (!r.d_out_path && any_gradient) {
    const char* flag = r.dq_path ? "--dq" : r.dk_path ? "--dk" : "--dv";
    throw UsageError(std::string(flag) + " needs --d-out PATH: the gradients are computed from the upstream "
                                         "gradient dO = ∂L/∂O");
  }
  if (r.d_out_path && !any_gradient) {
    throw UsageError("--d-out is given but no gradient is asked for: add --dq, --dk and/or --dv PATH");
  }
}

// The flags, each filling its field of `r` as the command line is parsed.
void add_flags(CommandLine& c, Request& r) {
  c.section("Packed variable-length batches (FlashAttention's varlen layout, attnkit/varlen.hpp)");
  c.value("--cu-seqlens-q", r.cu_seqlens_q, parse_integer_list, "LIST",
          "where each sequence's queries start in Q, e.g. 0,5,12 (B + 1 offsets, from 0,\n"
          "ending at Q's rows); Q, K, V are then packed [total, H, D]: sequence b's\n"
          "queries are rows LIST[b] .. LIST[b+1]-1 of Q, and it sees only its own keys");
  c.value("--cu-seqlens-k", r.cu_seqlens_k, parse_integer_list, "LIST",
          "the same for K and V (both flags go together)\n"
          "Outputs are packed too: O [total_q, Hq, d_v], LSE [Hq, total_q], gradients\n"
          "the shapes of Q, K and V; probabilities [B, Hq, max_n, max_m], zero past each\n"
          "sequence's lengths. --mask is per sequence, [max_n, max_m] or\n"
          "[B|1, Hq|1, max_n, max_m]; --key-lengths does not apply.");
  c.section("Required");
  c.text("--q", r.q_path, "PATH", "queries   [B, Hq, n, d_k]");
  c.text("--k", r.k_path, "PATH", "keys      [B, Hkv, m, d_k]   (Hq % Hkv == 0: grouped-query attention)");
  c.text("--v", r.v_path, "PATH", "values    [B, Hkv, m, d_v]");
  c.text("--out", r.out_path, "PATH", "where to write O [B, Hq, n, d_v] (optional with --d-out)");
  c.section("Outputs");
  c.text("--lse", r.lse_path, "PATH", "also write the log-sum-exp of each row's logits [B, Hq, n] (float32)");
  c.text("--probs", r.probs_path, "PATH", "also write the softmax weights before dropout [B, Hq, n, m]");
  c.section("Gradients (the backward runs on the O and LSE of the forward above)");
  c.text("--d-out", r.d_out_path, "PATH", "the upstream gradient dO = ∂L/∂O, the shape of O [B, Hq, n, d_v]");
  c.text("--dq", r.dq_path, "PATH", "write ∂L/∂Q [B, Hq, n, d_k]");
  c.text("--dk", r.dk_path, "PATH", "write ∂L/∂K [B, Hkv, m, d_k] (summed over the query heads sharing a KV head)");
  c.text("--dv", r.dv_path, "PATH",
         "write ∂L/∂V [B, Hkv, m, d_v] (likewise)\n"
         "--d-out needs at least one of --dq, --dk, --dv, and they need --d-out");
  c.section("Options");
  add_attention_flags(c, r.flags, true);
  c.flag("--verbose", r.verbose, "print a one-line summary");
}

// What the flags say together: the required ones, and the ones that go in pairs.
void check_request(const CommandLine& c, const Request& r) {
  std::string missing;
  for (const char* flag : {"--q", "--k", "--v"}) {
    if (!c.given(flag)) missing += std::string(missing.empty() ? "" : ", ") + flag;
  }
  if (!r.out_path && !r.d_out_path) missing += std::string(missing.empty() ? "" : ", ") + "--out";
  if (!missing.empty()) throw UsageError("missing required flag(s) " + missing);
  check_gradient_flags(r);
  if (r.cu_seqlens_q.has_value() != r.cu_seqlens_k.has_value()) {
    throw UsageError(std::string(r.cu_seqlens_q ? "--cu-seqlens-q needs --cu-seqlens-k" : "--cu-seqlens-k needs --cu-seqlens-q") +
                     ": a packed batch lists where each sequence starts in Q and in K");
  }
  // Offset values are checked by the library, which names the offending index.
  if (r.packed() && !r.flags.key_lengths.empty()) {
    throw UsageError("--key-lengths does not apply to a packed batch: --cu-seqlens-k gives each sequence its keys");
  }
}

// ---- inputs ----

struct Inputs {
  Tensor q, k, v;
  Tensor d_out;  // empty unless --d-out is given
  int rank = 0;  // shared rank of q, k, v (and d_out); outputs keep it
};

Inputs read_inputs(const Request& r) {
  Tensor q = read_npy(r.q_path), k = read_npy(r.k_path), v = read_npy(r.v_path);
  check_rank(q, "--q", r.q_path);
  check_rank(k, "--k", r.k_path);
  check_rank(v, "--v", r.v_path);
  for (const auto& [flag, path, t] : {std::tuple{"--q", &r.q_path, &q}, std::tuple{"--k", &r.k_path, &k},
                                      std::tuple{"--v", &r.v_path, &v}}) {
    if (r.packed() && t->rank() != 3) {
      throw Error(ErrorCode::invalid_shape, std::string(flag) + " " + *path + " has shape " + shape_of(*t) +
                                                "; with --cu-seqlens-q the inputs are packed [total, H, D]");
    }
  }
  if (k.rank() != q.rank() || v.rank() != q.rank()) {
    throw Error(ErrorCode::invalid_shape, "--q, --k and --v must have the same rank; got q " + shape_of(q) +
                                              ", k " + shape_of(k) + ", v " + shape_of(v));
  }
  const DType dtype = compute_dtype(r.flags.dtype, q, r.q_path);
  Inputs in;
  in.rank = q.rank();
  if (r.d_out_path) {
    Tensor d_out = read_npy(*r.d_out_path);
    check_rank(d_out, "--d-out", *r.d_out_path);
    if (d_out.rank() != q.rank()) {
      throw Error(ErrorCode::invalid_shape, "--d-out " + *r.d_out_path + " has shape " + shape_of(d_out) +
                                                "; it must have the shape of O, of the same rank as --q " +
                                                shape_of(q));
    }
    in.d_out = input_as(std::move(d_out), dtype, r.flags.dtype, "--d-out", *r.d_out_path);
  }
  in.q = as_dtype(std::move(q), dtype);
  in.k = input_as(std::move(k), dtype, r.flags.dtype, "--k", r.k_path);
  in.v = input_as(std::move(v), dtype, r.flags.dtype, "--v", r.v_path);
  return in;
}

// ---- outputs ----

// `full` (a shape in the rank-4 problem: O, LSE or probabilities) without the leading size-1
// dimensions that view4() added to the inputs.
std::vector<std::int64_t> in_input_rank(std::vector<std::int64_t> full, const Inputs& in) {
  const auto added = static_cast<std::ptrdiff_t>(kAttentionRank - in.rank);
  full.erase(full.begin(), full.begin() + added);
  return full;
}

struct Outputs {
  Tensor out, lse, probs;
  Tensor dq, dk, dv;  // with --d-out: the backward writes all three; the flags choose which are saved
};

bool wants_gradients(const Request& r) { return r.d_out_path.has_value(); }

// The longest sequence's length, from its offsets.
std::int64_t longest(const std::vector<std::int64_t>& offsets) {
  std::int64_t most = 0;
  for (std::size_t b = 1; b < offsets.size(); ++b) most = std::max(most, offsets[b] - offsets[b - 1]);
  return most;
}

Outputs allocate_outputs(const Request& r, const Inputs& in) {
  const DType dtype = in.q.dtype();
  const bool lse = r.lse_path || wants_gradients(r);
  Outputs o;
  if (r.packed()) {  // O [total_q, Hq, d_v], LSE [Hq, total_q], probabilities [B, Hq, max_n, max_m]
    const std::int64_t total_q = in.q.shape()[0], heads = in.q.shape()[1], d_v = in.v.shape()[2];
    const auto sequences = std::max<std::int64_t>(static_cast<std::int64_t>(r.cu_seqlens_q->size()) - 1, 0);
    o.out = Tensor(dtype, {total_q, heads, d_v});
    if (lse) o.lse = Tensor(DType::f32, {heads, total_q});
    if (r.probs_path) o.probs = Tensor(dtype, {sequences, heads, longest(*r.cu_seqlens_q), longest(*r.cu_seqlens_k)});
  } else {
    const ConstTensorView q = in.q.view4(), k = in.k.view4(), v = in.v.view4();
    const std::int64_t batch = q.size(0), heads = q.size(1), n = q.size(2), m = k.size(2), d_v = v.size(3);
    o.out = Tensor(dtype, in_input_rank({batch, heads, n, d_v}, in));
    if (lse) o.lse = Tensor(DType::f32, in_input_rank({batch, heads, n}, in));
    if (r.probs_path) o.probs = Tensor(dtype, in_input_rank({batch, heads, n, m}, in));
  }
  if (wants_gradients(r)) {
    o.dq = Tensor(dtype, in.q.shape());
    o.dk = Tensor(dtype, in.k.shape());
    o.dv = Tensor(dtype, in.v.shape());
  }
  return o;
}

// The output flags, each with its path field and the tensor it saves, in flag order.
struct OutputFlag {
  const char* flag;
  const std::optional<std::string> Request::*path;
  Tensor Outputs::*tensor;
};
constexpr OutputFlag kOutputFlags[] = {
    {"--out", &Request::out_path, &Outputs::out}, {"--lse", &Request::lse_path, &Outputs::lse},
    {"--probs", &Request::probs_path, &Outputs::probs}, {"--dq", &Request::dq_path, &Outputs::dq},
    {"--dk", &Request::dk_path, &Outputs::dk},    {"--dv", &Request::dv_path, &Outputs::dv},
};

// Every output the flags name, checked and staged before any input is read: a directory, a path
// this user may not write, or one file named twice fails now, with nothing read or written.
void stage_outputs(const Request& r, StagedOutputs& staged) {
  for (const OutputFlag& o : kOutputFlags) {
    if (r.*o.path) staged.add(*(r.*o.path), o.flag);
  }
}

// Every requested file, or none: a failure on the last leaves the first ones untouched.
void write_outputs(const Request& r, const Outputs& o, StagedOutputs& staged) {
  for (const OutputFlag& flag : kOutputFlags) {
    if (!(r.*flag.path)) continue;
    const Tensor& tensor = o.*flag.tensor;
    staged.write(*(r.*flag.path), [&](const std::string& file) { write_npy(file, tensor); });
  }
  staged.commit();
}

void print_summary(std::ostream& out, const Request& r, const Inputs& in, const Outputs& o) {
  const DType dtype = in.q.dtype();
  out << "attnkit run: q " << shape_of(in.q) << ", k " << shape_of(in.k) << ", v " << shape_of(in.v) << " in "
      << dtype_name(dtype) << "; " << (wants_gradients(r) ? "forward and backward" : "forward") << " on the "
      << kernel_name(resolve_kernel(r.flags.options.kernel, dtype)) << " kernel ->";
  for (const OutputFlag& flag : kOutputFlags) {
    if (r.*flag.path) out << ' ' << *(r.*flag.path) << ' ' << shape_of(o.*flag.tensor);
  }
  out << "; " << num_threads() << " threads\n";
}

// forward (and backward) on the inputs seen as rank 4.
void run_batched(const Request& r, const Inputs& in, const AttentionOptions& options, Outputs& o) {
  ForwardExtras extras;
  if (r.lse_path || wants_gradients(r)) extras.lse = o.lse.view().unsqueezed_to(kAttentionRank - 1);
  if (r.probs_path) extras.probs = o.probs.view4();
  forward(in.q.view4(), in.k.view4(), in.v.view4(), o.out.view4(), options, extras);
  if (wants_gradients(r)) {
    const ConstTensorView lse = o.lse.view().unsqueezed_to(kAttentionRank - 1);
    backward(in.q.view4(), in.k.view4(), in.v.view4(), o.out.view4(), in.d_out.view4(), lse, o.dq.view4(),
             o.dk.view4(), o.dv.view4(), options);
  }
}

// varlen_forward (and varlen_backward) on the packed inputs; the offsets are the flags' lists.
void run_packed(const Request& r, const Inputs& in, const AttentionOptions& options, Outputs& o) {
  const auto offsets_view = [](const std::vector<std::int64_t>& list) {
    return ConstTensorView::contiguous(list.data(), DType::i64, {static_cast<std::int64_t>(list.size())});
  };
  const SequenceOffsets offsets{offsets_view(*r.cu_seqlens_q), offsets_view(*r.cu_seqlens_k)};
  ForwardExtras extras;
  if (r.lse_path || wants_gradients(r)) extras.lse = o.lse.view();
  if (r.probs_path) extras.probs = o.probs.view();
  varlen_forward(in.q.view(), in.k.view(), in.v.view(), offsets, o.out.view(), options, extras);
  if (wants_gradients(r)) {
    varlen_backward(in.q.view(), in.k.view(), in.v.view(), offsets, o.out.view(), in.d_out.view(), o.lse.view(),
                    o.dq.view(), o.dk.view(), o.dv.view(), options);
  }
}

int run(const CommandArgs& words, std::ostream& out) {
  Request r;
  CommandLine command_line(kAbout, kFooter);
  add_flags(command_line, r);
  if (!command_line.parse(words, out)) return kExitOk;  // --help
  check_request(command_line, r);
  if (r.flags.threads) set_num_threads(*r.flags.threads);
  StagedOutputs staged;
  stage_outputs(r, staged);

  const Inputs in = read_inputs(r);
  Tensor mask;
  if (r.flags.mask_path) mask = read_npy(*r.flags.mask_path);
  const AttentionOptions options = with_spans(r.flags, r.flags.mask_path ? &mask : nullptr);

  Outputs o = allocate_outputs(r, in);
  if (r.packed()) {
    run_packed(r, in, options, o);
  } else {
    run_batched(r, in, options, o);
  }
  write_outputs(r, o, staged);  // only after every call succeeded: nothing is written on failure
  if (r.verbose) print_summary(out, r, in, o);
  return kExitOk;
}

}  // namespace

int run_command(const CommandArgs& args, std::ostream& out, std::ostream& err) {
  return guarded("run", err, [&] { return run(args, out); });
}

}  // namespace attnkit::cli
