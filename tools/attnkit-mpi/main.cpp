// attnkit-mpi: tools for attnkit::dist, run under mpirun. `attnkit-mpi bench` times ring attention
// (forward, then backward) on the ranks it is launched with and reports, per call (the slowest
// rank's, median of the repeats): the time, the attention rate over all ranks, the compute time, the
// time spent waiting for transfers (communication not hidden behind compute) and the bytes a rank
// sends. From those it derives the link rate that would hide every transfer behind compute.
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "attnkit/attention.hpp"
#include "attnkit/dist.hpp"
#include "attnkit/error.hpp"
#include "attnkit/tensor.hpp"

namespace {

using attnkit::DType;
using attnkit::Tensor;
namespace dist = attnkit::dist;

constexpr std::string_view kHelp = R"(Usage: mpirun -np P attnkit-mpi bench [options]

Times attnkit::dist ring attention (forward, then backward) on the P ranks it is launched with:
B = 1, H heads, one global sequence of N tokens split over the ranks, head size d, float32.
Per call (the slowest rank's, median of --repeats) it prints the time, GFLOP/s over all ranks, a
rank's compute time, its time waiting for K/V (and, backward, dK/dV) transfers that compute did not
hide, the bytes it sends, and the link rate that would hide every transfer (bytes / compute).

Options:
  --length N         global sequence length (default 8192; --quick 1024)
  --heads H          query heads (default 8; --quick 4)
  --kv-heads H       key/value heads, a divisor of H (default H)
  --dim d            head size (default 64)
  --layout L         zigzag (default) or contiguous
  --no-causal        full attention instead of causal
  --repeats R        timed calls per direction, median reported (default 5; --quick 2)
  --quick            small sizes, for a smoke test
  --json             one JSON object per direction instead of the table
  -h, --help         show this help

Examples:
  mpirun -np 2 attnkit-mpi bench --quick
  mpirun -np 4 --oversubscribe attnkit-mpi bench --length 16384 --json
  mpirun -np 8 --hostfile hosts attnkit-mpi bench --length 65536
)";

struct Config {
  std::int64_t length = 8192, heads = 8, kv_heads = 0, dim = 64;
  dist::Layout layout = dist::Layout::zigzag;
  bool causal = true, json = false;
  int repeats = 5;
};

std::int64_t parse_positive(const char* flag, const char* text) {
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || value < 1) {
    throw attnkit::Error(attnkit::ErrorCode::invalid_argument,
                         std::string(flag) + ": expected a positive integer, got '" + text + "'");
  }
  return value;
}

// Returns false when --help was given.
bool parse(int argc, char** argv, Config& c) {
  bool quick = false, length = false, heads = false, repeats = false;
  for (int i = 2; i < argc; ++i) {
    const std::string_view a = argv[i];
    const auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        throw attnkit::Error(attnkit::ErrorCode::invalid_argument, std::string(a) + ": needs a value");
      }
      return argv[++i];
    };
    if (a == "-h" || a == "--help") return false;
    if (a == "--quick") quick = true;
    else if (a == "--json") c.json = true;
    else if (a == "--no-causal") c.causal = false;
    else if (a == "--length") c.length = parse_positive("--length", value()), length = true;
    else if (a == "--heads") c.heads = parse_positive("--heads", value()), heads = true;
    else if (a == "--kv-heads") c.kv_heads = parse_positive("--kv-heads", value());
    else if (a == "--dim") c.dim = parse_positive("--dim", value());
    else if (a == "--repeats") c.repeats = static_cast<int>(parse_positive("--repeats", value())), repeats = true;
    else if (a == "--layout") {
      const std::string_view l = value();
      if (l == "zigzag") c.layout = dist::Layout::zigzag;
      else if (l == "contiguous") c.layout = dist::Layout::contiguous;
      else throw attnkit::Error(attnkit::ErrorCode::invalid_argument, "--layout: expected zigzag or contiguous, got '" + std::string(l) + "'");
    } else {
      throw attnkit::Error(attnkit::ErrorCode::invalid_argument, "unknown flag '" + std::string(a) + "' (see --help)");
    }
  }
  if (quick) {
    if (!length) c.length = 1024;
    if (!heads) c.heads = 4;
    if (!repeats) c.repeats = 2;
  }
  if (c.kv_heads == 0) c.kv_heads = c.heads;
  if (c.heads % c.kv_heads != 0) {
    throw attnkit::Error(attnkit::ErrorCode::invalid_argument, "--kv-heads: " + std::to_string(c.kv_heads) +
                                                                   " does not divide --heads " + std::to_string(c.heads));
  }
  return true;
}

Tensor random_shard(std::int64_t heads, std::int64_t rows, std::int64_t dim, std::mt19937_64& rng) {
  Tensor t(DType::f32, {1, heads, rows, dim});
  std::normal_distribution<float> normal(0.0f, 1.0f);
  float* data = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) data[i] = normal(rng);
  return t;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// Per call, each the slowest (or busiest) rank's, median over the repeats.
struct Figures {
  double seconds = 0;  // the whole call
  double compute = 0;  // summed over the ring steps: block kernels and merging
  double wait = 0;     // summed over the steps: blocked on transfers that compute did not hide
  double bytes = 0;    // sent to the next rank
  int steps = 0;       // ring steps of one call
};

// Times `call` (which fills `stats`) `repeats` times after one warm-up.
template <class Call>
Figures measure(const Config& c, dist::RingStats& stats, Call call) {
  call();
  std::vector<double> seconds, compute, wait, bytes;
  for (int r = 0; r < c.repeats; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    call();
    double figures[4] = {MPI_Wtime() - start, 0, 0, 0};
    for (const dist::RingStep& step : stats.steps) {
      figures[1] += step.compute_seconds;
      figures[2] += step.wait_seconds;
      figures[3] += static_cast<double>(step.bytes_sent);
    }
    MPI_Allreduce(MPI_IN_PLACE, figures, 4, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    seconds.push_back(figures[0]);
    compute.push_back(figures[1]);
    wait.push_back(figures[2]);
    bytes.push_back(figures[3]);
  }
  return {median(seconds), median(compute), median(wait), median(bytes), static_cast<int>(stats.steps.size())};
}

void report(const Config& c, int ranks, const char* direction, double flops, const Figures& f) {
  const double gflops = flops / f.seconds / 1e9;
  const double wait_share = f.wait / std::max(1e-12, f.compute + f.wait);
  // The link rate at which every transfer would take no longer than the compute it overlaps.
  const double hiding_bandwidth = f.bytes / std::max(1e-12, f.compute);  // bytes/s
  if (c.json) {
    std::printf("{\"direction\":\"%s\",\"ranks\":%d,\"length\":%lld,\"heads\":%lld,\"kv_heads\":%lld,\"dim\":%lld,"
                "\"layout\":\"%s\",\"causal\":%s,\"repeats\":%d,\"seconds\":%.6g,\"gflops\":%.6g,"
                "\"steps\":%d,\"seconds_per_step\":%.6g,\"compute_seconds\":%.6g,\"wait_seconds\":%.6g,"
                "\"wait_share\":%.4f,\"bytes_sent\":%.0f,\"bytes_per_step\":%.0f,\"hiding_bandwidth_gbps\":%.6g}\n",
                direction, ranks, static_cast<long long>(c.length), static_cast<long long>(c.heads),
                static_cast<long long>(c.kv_heads), static_cast<long long>(c.dim), dist::layout_name(c.layout),
                c.causal ? "true" : "false", c.repeats, f.seconds, gflops, f.steps, f.seconds / std::max(1, f.steps),
                f.compute, f.wait, wait_share, f.bytes, f.bytes / std::max(1, f.steps), hiding_bandwidth * 8 / 1e9);
    return;
  }
  std::printf("%-9s %5d %10.2f %9.2f %9.1f %12.2f %10.2f %7.0f%% %10.2f %12.2f\n", direction, ranks, 1e3 * f.seconds,
              1e3 * f.seconds / std::max(1, f.steps), gflops, 1e3 * f.compute, 1e3 * f.wait, 100 * wait_share,
              f.bytes / std::max(1, f.steps) / 1e6, hiding_bandwidth * 8 / 1e9);
}

int bench(const Config& c) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const std::int64_t rows = dist::local_length(c.layout, c.length, rank, ranks);
  std::mt19937_64 rng(0x5eed + static_cast<std::uint64_t>(rank));
  const Tensor q = random_shard(c.heads, rows, c.dim, rng), k = random_shard(c.kv_heads, rows, c.dim, rng),
               v = random_shard(c.kv_heads, rows, c.dim, rng), d_out = random_shard(c.heads, rows, c.dim, rng);
  Tensor out(DType::f32, {1, c.heads, rows, c.dim}), lse(DType::f32, {1, c.heads, rows});
  Tensor dq(DType::f32, q.shape()), dk(DType::f32, k.shape()), dv(DType::f32, v.shape());
  dist::RingStats stats;
  dist::RingOptions options;
  options.layout = c.layout;
  options.stats = &stats;
  if (c.causal) options.attention.causal = attnkit::Causal::top_left;

  // Forward 4·H·N²·d FLOPs (halved for causal), backward 2.5 times that (docs/performance.md).
  const double forward_flops = 4.0 * static_cast<double>(c.heads) * static_cast<double>(c.length) *
                               static_cast<double>(c.length) * static_cast<double>(c.dim) / (c.causal ? 2 : 1);
  if (rank == 0 && !c.json) {
    std::printf("attnkit-mpi bench: %d rank%s, N = %lld, %lld heads (%lld KV), d = %lld, %s, %s, %d kernel thread%s "
                "a rank, median of %d\n\n",
                ranks, ranks == 1 ? "" : "s", static_cast<long long>(c.length), static_cast<long long>(c.heads),
                static_cast<long long>(c.kv_heads), static_cast<long long>(c.dim), dist::layout_name(c.layout),
                c.causal ? "causal" : "full", attnkit::num_threads(), attnkit::num_threads() == 1 ? "" : "s", c.repeats);
    std::printf("%-9s %5s %10s %9s %9s %12s %10s %8s %10s %12s\n", "direction", "ranks", "ms/call", "ms/step",
                "GFLOP/s", "compute ms", "wait ms", "wait", "MB sent", "hiding Gb/s");
    std::printf("%-9s %5s %10s %9s %9s %12s %10s %8s %10s %12s\n", "", "", "", "", "(all)", "(a rank)", "(a rank)",
                "share", "per step", "");
  }
  const Figures forward = measure(c, stats, [&] {
    dist::ring_forward(MPI_COMM_WORLD, q.view(), k.view(), v.view(), out.view(), lse.view(), options);
  });
  if (rank == 0) report(c, ranks, "forward", forward_flops, forward);
  const Figures backward = measure(c, stats, [&] {
    dist::ring_backward(MPI_COMM_WORLD, q.view(), k.view(), v.view(), out.view(), d_out.view(), lse.view(), dq.view(),
                        dk.view(), dv.view(), options);
  });
  if (rank == 0) report(c, ranks, "backward", 2.5 * forward_flops, backward);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int status = 0;
  try {
    if (argc < 2 || std::strcmp(argv[1], "bench") != 0) {
      if (rank == 0) std::fputs(kHelp.data(), argc >= 2 && std::strcmp(argv[1], "--help") == 0 ? stdout : stderr);
      status = argc >= 2 && std::strcmp(argv[1], "--help") == 0 ? 0 : 2;
    } else {
      Config config;
      if (!parse(argc, argv, config)) {
        if (rank == 0) std::fputs(kHelp.data(), stdout);
      } else {
        status = bench(config);
      }
    }
  } catch (const std::exception& e) {
    // Every rank parses the same arguments and the library raises on every rank alike, so all
    // ranks get here together; only rank 0 speaks.
    if (rank == 0) std::fprintf(stderr, "attnkit-mpi: %s\n", e.what());
    status = 2;
  }
  MPI_Finalize();
  return status;
}
