// `attnkit bench --soak`: a short run passes with every kind of call made and checked, the
// comparisons it rests on catch wrong, unwritten and NaN outputs, a report with a failure or growing
// memory fails, and the flags are checked.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <cstdlib>
#include <utility>
#include <vector>

#include "attnkit/attnkit.hpp"
#include "cli/cli_runner.hpp"
#include "soak/compare.hpp"
#include "soak/random_call.hpp"
#include "soak/soak.hpp"

namespace attnkit::cli::soak {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(Soak, AShortRunMakesAndChecksEveryKindOfCall) {
  SoakOptions options;
  options.seconds = 300;   // a bound that is never reached: the run stops after max_calls
  options.max_calls = 60;  // with a fixed seed, the same calls everywhere
  options.seed = 12345;
  options.check_every = 1;
  const SoakReport r = run_soak(options);
  EXPECT_TRUE(r.passed()) << format_report(r);
  EXPECT_EQ(r.calls, options.max_calls);
  EXPECT_EQ(r.failures, 0);
  EXPECT_GT(r.forward_calls, 0);
  EXPECT_GT(r.backward_calls, 0);
  EXPECT_GT(r.attend_calls, 0);
  EXPECT_GT(r.refused_calls, 0);
  EXPECT_EQ(r.calls, r.forward_calls + r.backward_calls + r.attend_calls + r.refused_calls);
  EXPECT_EQ(r.checked, r.calls - r.refused_calls) << "check_every = 1 checks every valid call";
  ASSERT_EQ(r.errors.size(), 3u);
  for (const DTypeErrors& e : r.errors) {
    SCOPED_TRACE(dtype_name(e.dtype));
    EXPECT_GT(e.checked, 0);
    // Rounding is never exactly zero over dozens of random calls: a zero would mean nothing was compared.
    EXPECT_GT(e.forward.largest, 0.0);
    EXPECT_GT(e.forward.share, 0.0);
    for (const ErrorStat& stat : {e.forward, e.lse, e.backward}) EXPECT_LE(stat.share, 1.0);
  }
  EXPECT_TRUE(contains(format_report(r), "soak passed"));
  EXPECT_TRUE(contains(format_report_json(r), "\"passed\": true"));
  // The calls are drawn over every supported target, or run on the one ATTNKIT_TARGET forces (the test
  // command's scalar pass), and the target is restored afterwards.
  const char* forced = std::getenv("ATTNKIT_TARGET");
  const bool is_forced = forced != nullptr && *forced != '\0';
  EXPECT_EQ(r.targets, is_forced ? std::vector<Target>{active_target()} : supported_targets());
  if (is_forced) {
    EXPECT_STREQ(target_name(active_target()), forced);
  } else {
    EXPECT_EQ(active_target(), default_target());
  }
  for (Target t : r.targets) EXPECT_TRUE(contains(format_report(r), target_name(t))) << target_name(t);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  EXPECT_TRUE(r.memory_judged()) << "with glibc's malloc the heap figure is known";
#endif
}

TEST(Soak, ComparisonsCatchWrongUnwrittenAndNanOutputs) {
  Tensor reference(DType::f64, {2, 3});
  for (std::int64_t i = 0; i < 6; ++i) reference.data<double>()[i] = static_cast<double>(i) - 2.5;
  Tensor same = Tensor::converted(reference.view(), DType::f32);
  EXPECT_EQ(normalised_error(same, reference, 1.0), 0.0);

  Tensor off = same;
  off.data<float>()[4] += 0.5f;
  EXPECT_DOUBLE_EQ(normalised_error(off, reference, 2.0), 0.25);

  Tensor unwritten = same;
  unwritten.data<float>()[5] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isinf(normalised_error(unwritten, reference, 1.0)));

  const Tensor fresh = poisoned(DType::bf16, {4});
  EXPECT_TRUE(all_nan(fresh));
  EXPECT_FALSE(all_nan(same));

  Tensor lse(DType::f32, {3}), lse_ref(DType::f32, {3});
  const float inf = std::numeric_limits<float>::infinity();
  lse_ref.data<float>()[0] = -inf, lse_ref.data<float>()[1] = 10.0f, lse_ref.data<float>()[2] = 0.5f;
  lse.data<float>()[0] = -inf, lse.data<float>()[1] = 10.001f, lse.data<float>()[2] = 0.5f;
  EXPECT_NEAR(lse_error(lse, lse_ref), 1e-4, 1e-6) << "relative to |lse| when it is above 1";
  lse.data<float>()[0] = 0.0f;  // a row with no visible key must give −inf
  EXPECT_TRUE(std::isinf(lse_error(lse, lse_ref)));
}

// A gradient 10% off is 10% off, however large the other gradients of the call are (judged by the
// largest of dq, dk and dv, with a dv of 500, this dq's would have been 1e-3, under every dtype's
// bound): gradient_error sees the gradient and its reference only. The
// floor of 1 keeps a gradient that is zero in exact arithmetic from being judged against nothing.
TEST(Soak, EachGradientIsJudgedByItsOwnSize) {
  Tensor dq_reference(DType::f64, {4}), dq(DType::f32, {4});
  for (std::int64_t i = 0; i < 4; ++i) {
    dq_reference.data<double>()[i] = 2.0 + static_cast<double>(i);  // up to 5
    dq.data<float>()[i] = static_cast<float>(dq_reference.data<double>()[i]);
  }
  dq.data<float>()[3] = 5.5f;
  EXPECT_DOUBLE_EQ(gradient_error(dq, dq_reference), 0.1);

  Tensor cancelled_reference(DType::f64, {2}), cancelled(DType::f32, {2});
  cancelled_reference.data<double>()[0] = cancelled_reference.data<double>()[1] = 0.0;
  cancelled.data<float>()[0] = 0.003f, cancelled.data<float>()[1] = 0.0f;
  EXPECT_NEAR(gradient_error(cancelled, cancelled_reference), 0.003, 1e-9) << "over the floor of 1";
}

// The backward reads D = rowsum(dO ∘ O) from the output it is given; the reference computes D
// exactly. With one key every P is 1 and dk gathers every row's δD (the bf16 call that tripped the
// bound: n = 86, m = 1). Here the stored output is made off by 0.01 per element, far more than bf16
// rounds it: moving the reference's gradients to it must account for exactly that (what is left is
// float32 rounding), softcap's factor included, and leave a wrong element as wrong as it was.
TEST(Soak, TheReferencesGradientsAreMovedToTheStoredOutputExactly) {
  Random random(2024);
  const std::int64_t batch = 1, q_heads = 2, kv_heads = 1, n = 40, d = 8;
  for (const auto& [m, softcap] : {std::pair<std::int64_t, double>{1, 0.0}, {3, 0.0}, {5, 1.5}}) {
    SCOPED_TRACE("m = " + std::to_string(m) + ", softcap = " + std::to_string(softcap));
    const Input q = random_input(random, DType::f32, batch, q_heads, n, d, false);
    const Input k = random_input(random, DType::f32, batch, kv_heads, m, d, false);
    const Input v = random_input(random, DType::f32, batch, kv_heads, m, d, false);
    const Input d_out = random_input(random, DType::f32, batch, q_heads, n, d, false);
    AttentionOptions reference;
    reference.kernel = Kernel::reference;
    reference.softcap = softcap;
    Tensor out64(DType::f64, {batch, q_heads, n, d}), lse(DType::f32, {batch, q_heads, n});
    Tensor probs64(DType::f64, {batch, q_heads, n, m});
    forward(q.exact.view(), k.exact.view(), v.exact.view(), out64.view(), reference, {lse.view(), probs64.view()});
    Tensor dq64(DType::f64, {batch, q_heads, n, d}), dk64(DType::f64, {batch, kv_heads, m, d}), dv64(DType::f64, {batch, kv_heads, m, d});
    backward(q.exact.view(), k.exact.view(), v.exact.view(), out64.view(), d_out.exact.view(), lse.view(), dq64.view(), dk64.view(),
             dv64.view(), reference);

    Tensor out = Tensor::converted(out64.view(), DType::f32);
    for (std::int64_t i = 0; i < out.numel(); ++i) out.data<float>()[i] += (i % 3 == 0 ? -0.01f : 0.01f);
    AttentionOptions fast = reference;
    fast.kernel = Kernel::fast;
    Tensor dq(DType::f32, {batch, q_heads, n, d}), dk(DType::f32, {batch, kv_heads, m, d}), dv(DType::f32, {batch, kv_heads, m, d});
    backward(q.view, k.view, v.view, out.view(), d_out.view, lse.view(), dq.view(), dk.view(), dv.view(), fast);
    EXPECT_GT(gradient_error(dk, dk64), 1e-3) << "the off output shows in dk";
    EXPECT_GT(gradient_error(dq, dq64), 1e-3) << "and in dq";

    move_to_stored_output(dq64, dk64, out, out64, d_out.exact, probs64, q.exact, k.exact, 1.0 / std::sqrt(static_cast<double>(d)),
                          softcap);
    EXPECT_LT(gradient_error(dk, dk64), 1e-5) << "only float32 rounding is left";
    EXPECT_LT(gradient_error(dq, dq64), 1e-5);
    EXPECT_LT(gradient_error(dv, dv64), 1e-5) << "dv does not read D";
    Tensor wrong = dk;
    wrong.data<float>()[wrong.numel() - 1] += 0.05f;
    EXPECT_NEAR(gradient_error(wrong, dk64), 0.05 / std::max(1.0, max_abs(dk64)), 1e-5);
  }
}

TEST(Soak, AFailureOrGrowingMemoryFailsTheRun) {
  SoakReport r;
  r.calls = 10;
  r.after_warmup.heap_known = r.at_end.heap_known = true;
  EXPECT_TRUE(r.passed());
  r.at_end.heap_bytes = kHeapSlack;  // grew by the whole slack after warm-up
  EXPECT_FALSE(r.memory_flat());
  EXPECT_FALSE(r.passed());
  EXPECT_TRUE(contains(format_report(r), "GROWING"));
  r.at_end.heap_known = false;  // under a sanitizer or valgrind the figures say nothing: not judged
  EXPECT_TRUE(r.memory_flat());
  EXPECT_TRUE(contains(format_report(r), "not judged")) << format_report(r);
  r.at_end.heap_known = true;
  r.at_end.heap_bytes = 0;
  r.failures = 1;
  r.first_failures = {"forward f32 B=1 ...: out error 0.5 exceeds the bound 0.0001"};
  EXPECT_FALSE(r.passed());
  const std::string text = format_report(r);
  EXPECT_TRUE(contains(text, "FAILED: forward f32 B=1 ...: out error 0.5")) << text;
  EXPECT_TRUE(contains(text, "soak FAILED")) << text;
  EXPECT_TRUE(contains(format_report_json(r), "\"passed\": false"));
  SoakReport empty;
  EXPECT_FALSE(empty.passed()) << "a run that made no call proves nothing";
}

TEST(SoakCommand, RunsFromTheCommandLineAndChecksItsFlags) {
  const auto ok = testing::run_cli({"bench", "--soak", "0.5", "--seed", "9", "--json"});
  EXPECT_EQ(ok.code, 0) << ok.out << ok.err;
  EXPECT_TRUE(contains(ok.out, "{\"soak\": {")) << ok.out;
  EXPECT_TRUE(contains(ok.out, "\"seed\": 9")) << ok.out;
  EXPECT_TRUE(contains(ok.out, "\"failures\": 0")) << ok.out;

  EXPECT_EQ(testing::run_cli({"bench", "--soak", "0"}).code, 2);
  EXPECT_EQ(testing::run_cli({"bench", "--soak", "ten"}).code, 2);
  const auto mixed = testing::run_cli({"bench", "--soak", "1", "--quick"});
  EXPECT_EQ(mixed.code, 2);
  EXPECT_TRUE(contains(mixed.err, "--quick is a timing flag")) << mixed.err;
  EXPECT_EQ(testing::run_cli({"bench", "--seed", "3"}).code, 2) << "--seed goes with --soak";
}

}  // namespace
}  // namespace attnkit::cli::soak
