// The persistent pool and the parallel loops on it: every index once, errors, nesting, concurrent
// callers, resizing, worker ids, and the thread count setting. Suite names start with ThreadPool so
// that scripts/check.sh runs them under ThreadSanitizer.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <limits>
#include <future>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "attnkit/attention.hpp"
#include "attnkit/error.hpp"
#include "core/parallel_for.hpp"
#include "core/thread_pool.hpp"

namespace attnkit {
namespace {

using detail::parallel_for;
using detail::parallel_loops;
using detail::ThreadPool;

constexpr int kMaxTestThreads = 8;
const std::vector<std::int64_t> kCounts = {0, 1, 7, 1000};

// Restores the default thread count (and ATTNKIT_NUM_THREADS) when a test ends, even a failed one.
class ThreadSettingGuard {
 public:
  ThreadSettingGuard() {
    if (const char* env = std::getenv(kVariable)) saved_env_ = env;
  }
  ~ThreadSettingGuard() {
    if (saved_env_) {
      setenv(kVariable, saved_env_->c_str(), 1);
    } else {
      unsetenv(kVariable);
    }
    set_num_threads(0);
  }
  ThreadSettingGuard(const ThreadSettingGuard&) = delete;
  ThreadSettingGuard& operator=(const ThreadSettingGuard&) = delete;

  static constexpr const char* kVariable = "ATTNKIT_NUM_THREADS";

 private:
  std::optional<std::string> saved_env_;
};

// How many times each index ran. Atomic, since a bug could run one index on two threads.
class HitCounter {
 public:
  explicit HitCounter(std::int64_t count) : hits_(static_cast<std::size_t>(count)) {}
  void hit(std::int64_t index) { hits_.at(static_cast<std::size_t>(index)).fetch_add(1); }
  // The indices that did not run exactly once, for the failure message.
  std::string wrong() const {
    std::string out;
    for (std::size_t i = 0; i < hits_.size(); ++i) {
      const int n = hits_[i].load();
      if (n != 1) out += " [" + std::to_string(i) + "] ran " + std::to_string(n) + "x";
    }
    return out;
  }

 private:
  std::vector<std::atomic<int>> hits_;
};

// A meeting point for `expected` threads that gives up after a while instead of hanging the test:
// all arrive in time only if they run at the same time, each on its own thread.
class Rendezvous {
 public:
  explicit Rendezvous(int expected) : expected_(expected) {}
  // False if the others did not all arrive in time.
  bool arrive_and_wait() {
    std::unique_lock lock(mutex_);
    if (++arrived_ == expected_) all_arrived_.notify_all();
    return all_arrived_.wait_for(lock, kPatience, [this] { return arrived_ >= expected_; });
  }

 private:
  // Far longer than any scheduling delay on a loaded machine, far shorter than ctest's timeout.
  static constexpr std::chrono::seconds kPatience{20};
  const int expected_;
  int arrived_ = 0;
  std::mutex mutex_;
  std::condition_variable all_arrived_;
};

// Runs parallel_for(count) and returns the indices that did not run exactly once ("" if none).
std::string run_and_check(std::int64_t count) {
  HitCounter counter(count);
  parallel_for(count, [&](std::int64_t t) { counter.hit(t); });
  return counter.wrong();
}

// ---- ThreadPool, the class ----------------------------------------------------------------------

// Each participant waits until all have arrived, which only happens if they run at once, each on
// its own thread.
TEST(ThreadPool, RunsEachParticipantOnItsOwnThreadWithTheCallerAsZero) {
  ThreadPool pool;
  for (int width : {3, 1, 5, 2, 4}) {
    std::vector<std::thread::id> ids(static_cast<std::size_t>(width));
    Rendezvous all(width);
    std::atomic<int> late{0};
    std::atomic<int> told_wrong_count{0};
    ASSERT_TRUE(pool.try_run(width, width, [&](int p, int participants) {
      ids[static_cast<std::size_t>(p)] = std::this_thread::get_id();
      if (participants != width) ++told_wrong_count;
      if (!all.arrive_and_wait()) ++late;
    }));
    EXPECT_EQ(late.load(), 0) << "participants did not run at the same time, width " << width;
    EXPECT_EQ(told_wrong_count.load(), 0) << "a participant was told another participant count, width " << width;
    EXPECT_EQ(pool.width(), width);
    EXPECT_EQ(ids[0], std::this_thread::get_id()) << width;
    std::sort(ids.begin(), ids.end());
    EXPECT_EQ(std::adjacent_find(ids.begin(), ids.end()), ids.end()) << "a thread ran twice, width " << width;
  }
}

TEST(ThreadPool, RunsOnlyTheParticipantsOfANarrowerJob) {
  ThreadPool pool;
  HitCounter counter(3);
  ASSERT_TRUE(pool.try_run(6, 3, [&](int p, int) { counter.hit(p); }));
  EXPECT_EQ(counter.wrong(), "");
  EXPECT_EQ(pool.width(), 3) << "no thread is started that the job would leave idle";
}

// The pool grows only as far as a job has participants, and shrinks when fewer threads are asked for.
TEST(ThreadPool, GrowsOnlyAsFarAsAJobNeedsAndShrinksToTheThreadsAskedFor) {
  ThreadPool pool;
  const auto run = [&](int threads, int participants) {
    HitCounter counter(participants);
    EXPECT_TRUE(pool.try_run(threads, participants, [&](int p, int) { counter.hit(p); }));
    return counter.wrong();
  };
  EXPECT_EQ(run(64, 2), "");
  EXPECT_EQ(pool.width(), 2);
  EXPECT_EQ(run(64, 5), "");
  EXPECT_EQ(pool.width(), 5);
  EXPECT_EQ(run(64, 3), "");
  EXPECT_EQ(pool.width(), 5) << "a narrower job keeps the workers it does not use";
  EXPECT_EQ(run(3, 3), "");
  EXPECT_EQ(pool.width(), 3) << "fewer threads asked for: workers joined";
  EXPECT_EQ(pool.most_threads(), kMaxThreads);
}

TEST(ThreadPool, RefusesANestedJobAndAJobWhileBusy) {
  ThreadPool pool;
  std::atomic<int> nested_accepted{0};
  ASSERT_TRUE(pool.try_run(2, 2, [&](int, int) {
    if (pool.try_run(2, 2, [](int, int) {})) ++nested_accepted;  // from the caller and from the worker
  }));
  EXPECT_EQ(nested_accepted.load(), 0);

  std::promise<void> started, release;
  std::future<void> job_ended = std::async(std::launch::async, [&] {
    pool.try_run(2, 1, [&](int, int) {
      started.set_value();
      release.get_future().wait();
    });
  });
  started.get_future().wait();
  EXPECT_FALSE(pool.try_run(2, 2, [](int, int) {}));  // busy: refused at once, not queued
  release.set_value();
  job_ended.get();
  EXPECT_TRUE(pool.try_run(2, 2, [](int, int) {}));
}

TEST(ThreadPool, RefusesJobsAfterShutdown) {
  ThreadPool pool;
  ASSERT_TRUE(pool.try_run(4, 4, [](int, int) {}));
  pool.shutdown();
  EXPECT_EQ(pool.width(), 1);
  EXPECT_FALSE(pool.try_run(4, 4, [](int, int) {}));
}

// Jobs back to back (the workers still waiting briefly for the next) and after pauses longer than
// that wait (the workers asleep), of changing widths: every participant runs once per job, and each
// job sees everything the one before it wrote.
TEST(ThreadPool, RunsJobsBackToBackAndAfterTheWorkersHaveGoneToSleep) {
  ThreadPool pool;
  std::vector<int> runs(4, 0);
  int previous_total = 0;
  for (int job = 0; job < 400; ++job) {
    const int width = 2 + job % 3;
    std::atomic<int> saw_wrong_total{0};
    ASSERT_TRUE(pool.try_run(4, width, [&](int, int) {
      int total = 0;
      for (int r : runs) total += r;  // read by every participant, written by each only to its own element
      if (total != previous_total) ++saw_wrong_total;
    }));
    ASSERT_TRUE(pool.try_run(4, width, [&](int p, int) { ++runs[static_cast<std::size_t>(p)]; }));
    previous_total += width;
    EXPECT_EQ(saw_wrong_total.load(), 0) << "job " << job;
    if (job % 50 == 49) std::this_thread::sleep_for(std::chrono::microseconds(5 * ThreadPool::kSpinMicroseconds));
  }
  int total = 0;
  for (int r : runs) total += r;
  EXPECT_EQ(total, previous_total);
  EXPECT_EQ(runs[0], 400) << "the caller is participant 0 of every job";
}

// ---- parallel_for ---------------------------------------------------------------------------------

TEST(ThreadPoolParallelFor, RunsEveryIndexExactlyOnceForAnyThreadCount) {
  const ThreadSettingGuard guard;
  for (int threads = 1; threads <= kMaxTestThreads; ++threads) {
    set_num_threads(threads);
    for (std::int64_t count : kCounts) EXPECT_EQ(run_and_check(count), "") << threads << " threads, count " << count;
  }
}

// Each task waits until all four have started: only possible if four threads run them.
TEST(ThreadPoolParallelFor, SpreadsTasksOverTheThreads) {
  const ThreadSettingGuard guard;
  constexpr int kThreads = 4;
  set_num_threads(kThreads);
  Rendezvous all(kThreads);
  std::atomic<int> late{0};
  parallel_for(kThreads, [&](std::int64_t) {
    if (!all.arrive_and_wait()) ++late;
  });
  EXPECT_EQ(late.load(), 0);
}

TEST(ThreadPoolParallelFor, RethrowsTheFirstErrorAndStaysUsable) {
  const ThreadSettingGuard guard;
  for (int threads : {1, 2, 4}) {
    set_num_threads(threads);
    try {
      parallel_for(100, [](std::int64_t t) {
        if (t == 37) throw std::runtime_error("task 37 failed");
      });
      ADD_FAILURE() << "no exception, " << threads << " threads";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "task 37 failed");
    }
    // Every task throws: exactly one of their exceptions arrives.
    EXPECT_THROW(parallel_for(50, [](std::int64_t t) { throw std::out_of_range(std::to_string(t)); }),
                 std::out_of_range);
    EXPECT_EQ(run_and_check(1000), "") << threads << " threads, after the errors";
  }
}

// ---- parallel_loops --------------------------------------------------------------------------------

// Loop 2 reads what loop 1 wrote, and loop 3 what loop 2 wrote: each loop is complete before the
// next starts, whatever the thread count.
TEST(ThreadPoolParallelLoops, RunsEachLoopAfterThePreviousHasFinished) {
  const ThreadSettingGuard guard;
  constexpr std::int64_t kCount = 600;
  for (int threads = 1; threads <= 4; ++threads) {
    set_num_threads(threads);
    std::vector<std::int64_t> first(kCount, -1), second(kCount, -1), third(kCount, -1);
    parallel_loops(nullptr, {{kCount, [&](std::int64_t t) { first[t] = t; }},
                             {kCount, [&](std::int64_t t) { second[t] = first[kCount - 1 - t] + 1; }},
                             {3, [&](std::int64_t t) {
                                for (std::int64_t i = t; i < kCount; i += 3) third[i] = second[kCount - 1 - i] * 2;
                              }}});
    for (std::int64_t t = 0; t < kCount; ++t) {
      ASSERT_EQ(second[t], kCount - t) << threads << " threads, index " << t;
      ASSERT_EQ(third[t], 2 * (t + 1)) << threads << " threads, index " << t;
    }
  }
}

// Every thread that runs a task has run the preparation first, and no task starts before all
// preparations have returned (the last one to finish is slow on purpose).
TEST(ThreadPoolParallelLoops, PreparesEveryThreadBeforeAnyTask) {
  const ThreadSettingGuard guard;
  for (int threads = 1; threads <= 4; ++threads) {
    set_num_threads(threads);
    std::mutex mutex;
    std::set<std::thread::id> prepared, ran;
    std::atomic<int> preparations{0}, tasks_before_all_prepared{0};
    const auto prepare = [&] {
      if (preparations.fetch_add(1) == threads - 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      const std::lock_guard lock(mutex);
      prepared.insert(std::this_thread::get_id());
    };
    const auto task = [&](std::int64_t) {
      const std::lock_guard lock(mutex);
      if (prepared.size() < static_cast<std::size_t>(threads)) ++tasks_before_all_prepared;
      ran.insert(std::this_thread::get_id());
    };
    parallel_loops(prepare, {{40, task}, {40, task}});
    EXPECT_EQ(preparations.load(), threads) << "one preparation per thread";
    EXPECT_EQ(tasks_before_all_prepared.load(), 0) << threads << " threads";
    for (const std::thread::id& id : ran) EXPECT_TRUE(prepared.count(id)) << "a thread ran a task unprepared";
  }
}

// A preparation that throws: no task of any loop runs, and its exception reaches the caller.
TEST(ThreadPoolParallelLoops, RunsNoTaskWhenAPreparationThrows) {
  const ThreadSettingGuard guard;
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    std::atomic<int> preparations{0}, tasks{0};
    const auto prepare = [&] {
      if (preparations.fetch_add(1) == threads - 1) throw std::runtime_error("no memory for the workspace");
    };
    try {
      parallel_loops(prepare, {{100, [&](std::int64_t) { ++tasks; }}, {100, [&](std::int64_t) { ++tasks; }}});
      ADD_FAILURE() << "no exception, " << threads << " threads";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "no memory for the workspace");
    }
    EXPECT_EQ(tasks.load(), 0) << threads << " threads";
    EXPECT_EQ(run_and_check(1000), "") << threads << " threads, after the error";
  }
}

// A task that throws stops its loop early and the later loops entirely.
TEST(ThreadPoolParallelLoops, RunsNoLaterLoopAfterATaskThrows) {
  const ThreadSettingGuard guard;
  for (int threads : {1, 2, 4}) {
    set_num_threads(threads);
    std::atomic<int> later{0};
    EXPECT_THROW(parallel_loops(nullptr, {{50, [](std::int64_t t) {
                                             if (t == 10) throw std::out_of_range("task 10");
                                           }},
                                          {50, [&](std::int64_t) { ++later; }}}),
                 std::out_of_range);
    EXPECT_EQ(later.load(), 0) << threads << " threads";
  }
}

TEST(ThreadPoolParallelFor, NestedLoopsRunSeriallyOnTheOuterTasksThread) {
  const ThreadSettingGuard guard;
  set_num_threads(4);
  constexpr std::int64_t kOuter = 8, kInner = 9;
  HitCounter counter(kOuter * kInner);
  std::atomic<int> inner_on_other_thread{0};
  parallel_for(kOuter, [&](std::int64_t i) {
    const std::thread::id outer_thread = std::this_thread::get_id();
    parallel_for(kInner, [&](std::int64_t j) {
      counter.hit(i * kInner + j);
      if (std::this_thread::get_id() != outer_thread) ++inner_on_other_thread;
    });
  });
  EXPECT_EQ(counter.wrong(), "");
  EXPECT_EQ(inner_on_other_thread.load(), 0);
}

// Four user threads call at once, with nested loops too: the pool serves one, the others run their
// loops themselves; every loop completes and runs each index once.
TEST(ThreadPoolParallelFor, ConcurrentCallsFromUserThreadsAllComplete) {
  const ThreadSettingGuard guard;
  set_num_threads(3);
  constexpr int kUsers = 4, kRounds = 50;
  constexpr std::int64_t kCount = 257, kInner = 3;
  std::vector<std::string> wrong(kUsers);
  std::vector<std::thread> users;
  for (int u = 0; u < kUsers; ++u) {
    users.emplace_back([&, u] {
      for (int round = 0; round < kRounds; ++round) {
        HitCounter counter(kCount * kInner);
        parallel_for(kCount, [&](std::int64_t t) {
          parallel_for(kInner, [&](std::int64_t j) { counter.hit(t * kInner + j); });
        });
        wrong[static_cast<std::size_t>(u)] += counter.wrong();
      }
    });
  }
  for (std::thread& user : users) user.join();
  for (int u = 0; u < kUsers; ++u) EXPECT_EQ(wrong[static_cast<std::size_t>(u)], "") << "user thread " << u;
}

// set_num_threads(64) on any machine, then a loop of 3 tasks: 3 threads, not 64.
TEST(ThreadPoolParallelFor, NeverStartsMoreThreadsThanTasks) {
  const ThreadSettingGuard guard;
  set_num_threads(2);
  ASSERT_EQ(run_and_check(10), "");  // the pool shrinks to 2 (one loop alone never uses the pool)
  EXPECT_EQ(ThreadPool::instance().width(), 2);
  set_num_threads(64);
  EXPECT_EQ(run_and_check(3), "");
  EXPECT_EQ(ThreadPool::instance().width(), 3);
  EXPECT_EQ(run_and_check(7), "");
  EXPECT_EQ(ThreadPool::instance().width(), 7);
  EXPECT_EQ(num_threads(), 64);
}

TEST(ThreadPoolParallelFor, FollowsSetNumThreadsBetweenCalls) {
  const ThreadSettingGuard guard;
  for (int threads : {1, 4, 2, 8, 3, 1, 0, 5}) {
    set_num_threads(threads);
    EXPECT_EQ(run_and_check(1000), "") << threads << " threads";
    if (threads > 1) {
      EXPECT_EQ(ThreadPool::instance().width(), threads);
    }
  }
}

// fork() copies the pool but not its threads; the child must get working threads of its own.
TEST(ThreadPoolParallelFor, WorksInAForkedChild) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer does not support new threads in the child of a multi-threaded fork";
#endif
  const ThreadSettingGuard guard;
  set_num_threads(4);
  ASSERT_EQ(run_and_check(100), "");  // the parent's pool has its workers now
  constexpr unsigned kChildSeconds = 30;  // a child that hangs is killed by SIGALRM and fails the test
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(kChildSeconds);
    _exit(run_and_check(1000).empty() ? EXIT_SUCCESS : EXIT_FAILURE);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == EXIT_SUCCESS) << "child status " << status;
  EXPECT_EQ(run_and_check(1000), "") << "the parent's pool after the fork";
}

// ---- the thread count setting ---------------------------------------------------------------------

TEST(ThreadPoolSettings, AttnkitNumThreadsSetsTheDefault) {
  const ThreadSettingGuard guard;
  set_num_threads(0);
  unsetenv(ThreadSettingGuard::kVariable);
  const int hardware = num_threads();
  EXPECT_GE(hardware, 1);

  setenv(ThreadSettingGuard::kVariable, "3", 1);
  EXPECT_EQ(num_threads(), 3);
  set_num_threads(5);  // the call wins over the variable
  EXPECT_EQ(num_threads(), 5);
  set_num_threads(-1);  // back to the variable
  EXPECT_EQ(num_threads(), 3);
  EXPECT_EQ(run_and_check(100), "");
}

TEST(ThreadPoolSettings, MoreThreadsThanTheCapIsAnErrorThatChangesNothing) {
  const ThreadSettingGuard guard;
  set_num_threads(3);
  for (int n : {kMaxThreads + 1, 5000, std::numeric_limits<int>::max()}) {
    try {
      set_num_threads(n);
      ADD_FAILURE() << "set_num_threads(" << n << ") was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      const std::string message = e.what();
      EXPECT_NE(message.find("n = " + std::to_string(n)), std::string::npos) << message;
      EXPECT_NE(message.find("kMaxThreads = 1024"), std::string::npos) << message;
    }
    EXPECT_EQ(num_threads(), 3) << "the setting before the refused call";
  }
  set_num_threads(kMaxThreads);  // the cap itself is a valid setting
  EXPECT_EQ(num_threads(), kMaxThreads);
}

TEST(ThreadPoolSettings, InvalidAttnkitNumThreadsFallsBackToHardwareConcurrency) {
  const ThreadSettingGuard guard;
  set_num_threads(0);
  unsetenv(ThreadSettingGuard::kVariable);
  const int hardware = num_threads();
  for (const char* value : {"", "0", "-2", "abc", "3x", "2.5", "1025", "4097", "99999999999999999999999"}) {
    setenv(ThreadSettingGuard::kVariable, value, 1);
    EXPECT_EQ(num_threads(), hardware) << "ATTNKIT_NUM_THREADS=\"" << value << "\"";
  }
}

}  // namespace
}  // namespace attnkit
