// Threads against the scheduler: handles dropped, nodes inspected and the
// default device switched while stream workers evaluate; back-pressure on
// async_eval; stream worker threads that come and go. CI also runs this file
// under ThreadSanitizer (`make tsan`), where a data race fails the test.
#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "core/array_desc.h"
#include "core/primitive.h"
#include "core/scheduler.h"
#include "test_util.h"

namespace kiln {
namespace {

using namespace std::chrono_literals;

// The repro: a consumer of a node that is being computed loses its
// last outside handle while the worker detaches the node.
TEST(Concurrency, DroppingAConsumerWhileItsInputIsComputed) {
  array x = test::random_array({64});
  x.eval();
  for (int i = 0; i < 300; ++i) {
    array q = exp(x);
    async_eval(q);
    array p = q + 1.0f;
    q = {};
    // Sometimes before, mostly after the worker let go of q (a sleep
    // orders nothing, so ThreadSanitizer sees any unordered access).
    std::this_thread::sleep_for(std::chrono::microseconds((i % 4) * 300));
    p = {};
  }
  synchronize();
  EXPECT_EQ(array({}).size(), 0u);
}

TEST(Concurrency, DefaultDeviceIsSetWhileOpsReadIt) {
  std::atomic<bool> stop{false};
  std::thread setter([&] {
    while (!stop.load()) set_default_device(Device::cpu);
  });
  float total = 0;
  for (int i = 0; i < 200; ++i) total += (array(1.0f) + array(static_cast<float>(i))).item<float>();
  stop = true;
  setter.join();
  EXPECT_FLOAT_EQ(total, 200.0f + 199.0f * 200.0f / 2.0f);
  EXPECT_EQ(default_device().type, Device::cpu);
}

// Reading a node's primitive and inputs while a worker detaches it.
TEST(Concurrency, InspectingNodesWhileTheyAreEvaluated) {
  array x = test::random_array({256});
  x.eval();
  std::vector<array> chain{x};
  for (int i = 0; i < 200; ++i) chain.push_back(chain.back() * 1.001f + 0.5f);
  async_eval(chain.back());
  size_t seen_inputs = 0;
  while (!chain.back().is_evaluated()) {
    for (const auto& n : chain) {
      std::shared_ptr<Primitive> p = n.primitive();
      if (p) EXPECT_NE(std::string(p->name()), "");
      for (const auto& in : n.inputs()) seen_inputs += in.ndim() >= 0;
      if (n.has_primitive()) EXPECT_GE(n.ndim(), 0);
    }
  }
  chain.back().eval();
  EXPECT_TRUE(chain.back().inputs().empty());
  EXPECT_FALSE(chain.back().has_primitive());
  EXPECT_EQ(chain.back().primitive(), nullptr);
  std::vector<double> xv = test::to_double(x), yv = test::to_double(chain.back());
  for (size_t i = 0; i < xv.size(); ++i) {
    double v = xv[i];
    for (int k = 0; k < 200; ++k) v = v * 1.001 + 0.5;
    ASSERT_NEAR(yv[i], v, 1e-4 * std::fabs(v)) << i << " (inputs seen " << seen_inputs << ")";
  }
}

TEST(Concurrency, ThreadsEvaluateOverlappingGraphsOnSeveralStreams) {
  array x = test::random_array({333});
  array shared = exp(x) * 3.0f;
  std::vector<Stream> streams{default_stream(Device::cpu), new_stream(Device::cpu), new_stream(Device::cpu)};
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      Stream s = streams[t % streams.size()];
      array y = add(shared, array(static_cast<float>(t)), s);
      async_eval(y);
      array z = sum(y, false, s);
      double want = 0;
      for (double v : test::to_double(shared)) want += v + t;
      if (std::fabs(z.item<float>() - want) < 1e-3 * std::fabs(want)) ++ok;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), 6);
}

// Holds its stream's worker until released.
class Hold : public Primitive {
 public:
  Hold(Stream s, std::shared_ptr<std::atomic<bool>> open) : Primitive(s), open_(std::move(open)) {}
  void eval_cpu(const std::vector<array>&, array& out) override {
    while (!open_->load()) std::this_thread::sleep_for(1ms);
    detail::allocate(out, "hold");
    *reinterpret_cast<float*>(detail::data_ptr(out)) = 1.0f;
  }
  void eval_gpu(const std::vector<array>&, array&) override { throw Error("[hold] cpu only"); }
  const char* name() const override { return "Hold"; }

 private:
  std::shared_ptr<std::atomic<bool>> open_;
};

// async_eval in a loop with no waits must not queue without bound: once the
// stream has a full queue, the submitter waits for the worker.
TEST(Concurrency, AsyncEvalBlocksWhenTheStreamQueueIsFull) {
  Stream s = new_stream(Device::cpu);
  auto open = std::make_shared<std::atomic<bool>>(false);
  array held(Shape{}, float32, std::make_shared<Hold>(s, open), {});
  async_eval(held);
  constexpr int kSubmissions = 4 * kMaxQueuedBatches;
  std::atomic<int> submitted{0};
  std::vector<array> results(kSubmissions, array(0.0f));
  std::thread producer([&] {
    for (int i = 0; i < kSubmissions; ++i) {
      results[i] = add(array(static_cast<float>(i)), array(1.0f), s);
      async_eval(results[i]);
      ++submitted;
    }
  });
  std::this_thread::sleep_for(300ms);
  int while_held = submitted.load();
  open->store(true);
  producer.join();
  EXPECT_LE(while_held, kMaxQueuedBatches + 1);
  EXPECT_GE(while_held, kMaxQueuedBatches - 1);
  for (int i = 0; i < kSubmissions; i += 37) EXPECT_FLOAT_EQ(results[i].item<float>(), i + 1.0f);
  EXPECT_FLOAT_EQ(held.item<float>(), 1.0f);
}

// Notes the thread that ran it.
class WhichThread : public Primitive {
 public:
  WhichThread(Stream s, std::shared_ptr<std::thread::id> ran_on) : Primitive(s), ran_on_(std::move(ran_on)) {}
  void eval_cpu(const std::vector<array>&, array& out) override {
    *ran_on_ = std::this_thread::get_id();
    detail::allocate(out, "which_thread");
    *reinterpret_cast<float*>(detail::data_ptr(out)) = 2.0f;
  }
  void eval_gpu(const std::vector<array>&, array&) override { throw Error("[which_thread] cpu only"); }
  const char* name() const override { return "WhichThread"; }

 private:
  std::shared_ptr<std::thread::id> ran_on_;
};

// A synchronous eval on an idle CPU stream runs on the caller's thread; one
// on a stream with work queued or running waits its turn on the worker, so
// the stream's order holds either way.
TEST(Concurrency, EvalRunsOnTheCallerOnlyWhenItsStreamIsIdle) {
  Stream s = new_stream(Device::cpu);
  auto ran_on = std::make_shared<std::thread::id>();
  array a(Shape{}, float32, std::make_shared<WhichThread>(s, ran_on), {});
  array y = add(a, array(1.0f), s);
  eval(y);
  EXPECT_EQ(*ran_on, std::this_thread::get_id());
  EXPECT_FLOAT_EQ(y.item<float>(), 3.0f);

  auto open = std::make_shared<std::atomic<bool>>(false);
  array held(Shape{}, float32, std::make_shared<Hold>(s, open), {});
  async_eval(held);
  std::atomic<bool> done{false};
  array b(Shape{}, float32, std::make_shared<WhichThread>(s, ran_on), {});
  std::thread::id waiter_id;
  std::thread waiter([&] {
    waiter_id = std::this_thread::get_id();
    eval(b);
    done = true;
  });
  std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(done.load());  // queued behind the held batch, not run beside it
  open->store(true);
  waiter.join();
  EXPECT_TRUE(done.load());
  EXPECT_NE(*ran_on, waiter_id);  // the stream's worker ran it
  EXPECT_FLOAT_EQ(b.item<float>(), 2.0f);
  EXPECT_FLOAT_EQ(held.item<float>(), 1.0f);
}

// A single eval larger than the queue bound still runs (it is never split).
TEST(Concurrency, OneGraphLargerThanTheQueueBoundEvaluates) {
  array y = array(0.0f);
  for (int i = 0; i < 3 * kMaxQueuedNodes / 2; ++i) y = y + 1.0f;
  EXPECT_FLOAT_EQ(y.item<float>(), 1.5f * kMaxQueuedNodes);
}

// Fails while `failing` is set.
class FailsWhile : public Primitive {
 public:
  FailsWhile(Stream s, std::shared_ptr<std::atomic<bool>> failing) : Primitive(s), failing_(std::move(failing)) {}
  void eval_cpu(const std::vector<array>&, array& out) override {
    if (failing_->load()) throw Error("[fails_while] told to fail");
    detail::allocate(out, "fails_while");
    *reinterpret_cast<float*>(detail::data_ptr(out)) = 1.0f;
  }
  void eval_gpu(const std::vector<array>&, array&) override { throw Error("[fails_while] cpu only"); }
  const char* name() const override { return "FailsWhile"; }

 private:
  std::shared_ptr<std::atomic<bool>> failing_;
};

// A failed node is run again by the next eval that needs it, while other
// threads may be waiting on it or reading its error.
// DISABLED: known deadlock. A consumer already queued on a stream that waits
// on the failed node hangs when another thread re-schedules that node behind
// it on the same stream (the consumer waits for the re-run, which waits for
// the consumer's worker). Needs a per-node attempt count so that consumers
// scheduled before a re-run take the old outcome.
TEST(Concurrency, DISABLED_ThreadsRunAFailedNodeAgain) {
  auto failing = std::make_shared<std::atomic<bool>>(true);
  array node(Shape{}, float32, std::make_shared<FailsWhile>(default_stream(Device::cpu), failing), {});
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        array c = node + static_cast<float>(t);
        try {
          c.eval();
        } catch (const Error& e) {
          errors += std::string(e.what()).find("[fails_while] told to fail") != std::string::npos;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 200);
  failing->store(false);
  EXPECT_FLOAT_EQ((node + 1.0f).item<float>(), 2.0f);
}

int thread_count() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

// Idle streams do not keep a thread each: a worker thread exits after a
// while without work and a new one starts when work arrives, in order.
TEST(Concurrency, IdleStreamsDoNotKeepThreads) {
  int before = thread_count();
  std::vector<Stream> streams;
  for (int i = 0; i < 200; ++i) streams.push_back(new_stream(Device::cpu));
  std::vector<array> outs;
  for (size_t i = 0; i < streams.size(); ++i) outs.push_back(add(array(1.0f), array(static_cast<float>(i)), streams[i]));
  eval(outs);
  for (size_t i = 0; i < outs.size(); ++i) EXPECT_FLOAT_EQ(outs[i].item<float>(), 1.0f + i);
  int after = thread_count();
  auto deadline = std::chrono::steady_clock::now() + kStreamIdleTimeout * 4 + 2s;
  while (after > before + 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);
    after = thread_count();
  }
  EXPECT_LE(after, before + 2) << "threads before " << before;
  // The streams still work, and in order: a chain across submissions.
  array y = array(0.0f);
  for (int i = 0; i < 50; ++i) {
    y = add(y, array(1.0f), streams[i % 3]);
    async_eval(y);
  }
  EXPECT_FLOAT_EQ(y.item<float>(), 50.0f);
}

}  // namespace
}  // namespace kiln
