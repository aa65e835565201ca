// The encoder: batches of GPU nodes recorded into CUDA graphs give the same
// results as eager launches (and as the CPU), executables are reused across
// repeated steps, long batches are cut, failures fall back to eager
// evaluation with the right error, and KILN_CUDA_GRAPHS-style switching off
// works. Label `cuda`; skips where no GPU is present.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "backend/cuda/graph_encoder.h"
#include "kiln/kiln.h"
#include "kiln/llm.h"
#include "test_util.h"

namespace kiln::test {
namespace {

class GpuGraphs : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!is_available(Device::gpu)) GTEST_SKIP() << "no GPU available for the cuda suite";
    saved_ = cuda::graph_settings().enabled.load();
    cuda::graph_settings().enabled = true;
  }
  void TearDown() override {
    if (is_available(Device::gpu)) cuda::graph_settings().enabled = saved_;
  }
  bool saved_ = true;
};

void expect_close(const array& got, const array& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  auto g = to_double(got), w = to_double(want);
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_NEAR(g[i], w[i], tol * std::max(1.0, std::abs(w[i]))) << what << " element " << i;
  }
}

// A step with the op families a decode step uses: matmul (cuBLASLt inside
// the capture), broadcast elementwise, reductions, softmax, gather, casts,
// transposed views.
array step(const array& x, const array& w, const array& bias, const array& idx, StreamOrDevice s) {
  array h = add(matmul(x, w, s), bias, s);
  h = multiply(h, sigmoid(h, s), s);
  array p = softmax(h, -1, s);
  array r = sum(multiply(p, h, s), -1, true, s);
  array t = take(transpose(h, s), idx, 0, s);  // rows of h^T
  array m = reshape(max(t, 0, false, s), {-1, 1}, s);
  array out = add(subtract(h, r, s), astype(astype(m, bfloat16, s), float32, s), s);
  return tanh(out, s);
}

TEST_F(GpuGraphs, BatchMatchesCpuAndEager) {
  array x = random_array({5, 33}), w = random_array({33, 47}), bias = random_array({47});
  array idx = array({3, 0, 46, 12}, int32);
  array want = step(x, w, bias, idx, Device::cpu);
  auto before = cuda::graph_stats();
  array got = step(x, w, bias, idx, Device::gpu);
  eval(got, want);
  auto after = cuda::graph_stats();
  EXPECT_GE(after.launched, before.launched + 1);
  EXPECT_GE(after.nodes, before.nodes + 10);
  expect_close(got, want, 1e-4, "graph");

  cuda::graph_settings().enabled = false;
  auto off_before = cuda::graph_stats();
  array eager = step(x, w, bias, idx, Device::gpu);
  eval(eager);
  EXPECT_EQ(cuda::graph_stats().launched, off_before.launched);
  expect_close(eager, want, 1e-4, "eager");
}

TEST_F(GpuGraphs, RepeatedStepReusesTheExecutable) {
  array w = random_array({64, 64}), bias = random_array({64});
  array idx = array({1, 5, 63}, int32);
  array x = random_array({2, 64});
  eval(step(x, w, bias, idx, Device::gpu));  // first sight of this shape: instantiate
  auto before = cuda::graph_stats();
  for (int i = 0; i < 20; ++i) {
    x = random_array({2, 64});
    array got = step(x, w, bias, idx, Device::gpu);
    eval(got);
    if (i % 7 == 0) expect_close(got, step(x, w, bias, idx, Device::cpu), 1e-4, "step " + std::to_string(i));
  }
  auto after = cuda::graph_stats();
  // Almost every step reuses the cached executable; one may be rebuilt when
  // cudaGraphExecUpdate refuses a change (an event-wait node's event).
  EXPECT_LE(after.instantiated, before.instantiated + 2) << "a repeated step should update its cached graph";
  EXPECT_GE(after.updated, before.updated + 18);
}

// A repeated step over device-resident inputs is launched from its cached
// executable without being recorded again (graph_plan.h), and a replay never
// gives stale results: another scalar, an input at another address, an
// output the caller still holds, another attribute, each records anew.
array replay_step(const array& x, const array& w, float c, float eps, StreamOrDevice s) {
  array h = matmul(reshape(x, {4, 64}, s), w, s);  // cuBLASLt: a scratch workspace
  h = tanh(add(multiply(h, array(c), s), array(0.25f), s), s);
  h = fast::rms_norm(h, std::nullopt, eps, s);
  return sum(softmax(transpose(h, s), -1, s), 0, false, s);
}

TEST_F(GpuGraphs, RepeatedStepReplaysTheExecutable) {
  array w = random_array({64, 48});
  array x = add(random_array({256}), array(0.f), Device::gpu), x2 = add(random_array({256}), array(0.f), Device::gpu);
  eval(w, x, x2);
  eval(add(w, array(0.f), Device::gpu));
  w = add(w, array(0.f), Device::gpu);  // device-resident weights
  eval(w);
  auto cpu = [&](const array& in, float c, float eps) { return replay_step(in, w, c, eps, Device::cpu); };
  for (int i = 0; i < 3; ++i) eval(replay_step(x, w, 0.9f, 1e-5f, Device::gpu));  // record, record and keep
  auto before = cuda::graph_stats();
  for (int i = 0; i < 10; ++i) {
    array got = replay_step(x, w, 0.9f, 1e-5f, Device::gpu);
    eval(got);
    if (i % 4 == 0) expect_close(got, cpu(x, 0.9f, 1e-5f), 1e-4, "replay " + std::to_string(i));
  }
  auto after = cuda::graph_stats();
  EXPECT_GE(after.replayed, before.replayed + 8) << "a repeated step should replay its executable";
  // Everything a replay must not reuse: each gives the right numbers.
  expect_close(replay_step(x, w, 0.5f, 1e-5f, Device::gpu), cpu(x, 0.5f, 1e-5f), 1e-4, "another scalar");
  expect_close(replay_step(x2, w, 0.9f, 1e-5f, Device::gpu), cpu(x2, 0.9f, 1e-5f), 1e-4, "another input");
  expect_close(replay_step(x, w, 0.9f, 0.5f, Device::gpu), cpu(x, 0.9f, 0.5f), 1e-4, "another eps");
  array held = replay_step(x, w, 0.9f, 1e-5f, Device::gpu);
  eval(held);
  const std::vector<double> held_values = to_double(held);
  for (int i = 0; i < 4; ++i) {
    array next = replay_step(i % 2 ? x : x2, w, 0.9f, 1e-5f, Device::gpu);
    eval(next);
    expect_close(next, cpu(i % 2 ? x : x2, 0.9f, 1e-5f), 1e-4, "while the last output is held");
  }
  EXPECT_EQ(to_double(held), held_values) << "a replay wrote into an output the caller holds";
  // Inputs that are views of one buffer at other offsets (a loop over rows):
  // the views inside the step follow them.
  array rows = add(random_array({6, 256}), array(0.f), Device::gpu);
  eval(rows);
  for (int i = 0; i < 6; ++i) {
    array row = reshape(slice(rows, {i, 0}, {i + 1, 256}), {256});
    eval(row);
    for (int k = 0; k < 3; ++k) {
      expect_close(replay_step(row, w, 0.9f, 1e-5f, Device::gpu), cpu(row, 0.9f, 1e-5f), 1e-4,
                   "row " + std::to_string(i));
    }
  }
}

// A step with a gather replays too (the plan keeps the gather's index
// slot); an index that goes out of range in a replayed step (written in
// place into the same buffer) still reports the op's error, and later
// replays of the same executable do not report it again. Queued without
// waiting, steps find the last run's check still in flight and take other
// variants; the answers stay right.
TEST_F(GpuGraphs, StepsWithIndexChecksReplay) {
  array table = add(random_array({10, 8}), array(0.f), Device::gpu);
  eval(table);
  const std::vector<double> rows_of = to_double(table);
  auto step = [&](const array& i) { return multiply(take(table, i, 0, Device::gpu), array(2.f), Device::gpu); };
  auto expect_row = [&](const array& got, int r, const std::string& what) {
    const std::vector<double> g = to_double(got);
    ASSERT_EQ(g.size(), 8u) << what;
    for (int j = 0; j < 8; ++j) ASSERT_EQ(g[j], 2 * rows_of[r * 8 + j]) << what << " row " << r;
  };
  array idx = add(array({3}, int32), array(0, int32), Device::gpu);
  eval(idx);
  // Writes v into idx's buffer (the update takes it over: nobody else holds it).
  auto set = [&](int v) {
    array old = std::move(idx);
    idx = slice_update(old, array({v}, int32), {0}, {1}, Device::gpu);
    old = array(0);
    eval(idx);
  };
  for (int k = 0; k < 3; ++k) eval(step(idx));  // record, record and keep
  const auto before = cuda::graph_stats();
  for (int k = 0; k < 6; ++k) expect_row(step(idx), 3, "step");
  EXPECT_GE(cuda::graph_stats().replayed, before.replayed + 5) << "a step with a gather should replay";
  set(10);  // out of range for 10 rows
  const auto bad_before = cuda::graph_stats();
  try {
    eval(step(idx));
    FAIL() << "an out-of-range index in a replayed step was not reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
  EXPECT_GE(cuda::graph_stats().replayed, bad_before.replayed + 1) << "the failing step was not a replay";
  set(7);
  for (int k = 0; k < 4; ++k) expect_row(step(idx), 7, "after the error");
  // Queued: nothing waited for between the steps.
  std::vector<array> queued;
  for (int k = 0; k < 10; ++k) {
    queued.push_back(step(idx));
    async_eval(queued.back());
  }
  for (const array& q : queued) expect_row(q, 7, "queued");
}

TEST_F(GpuGraphs, FeedbackChainAcrossEvals) {
  // Each eval's result feeds the next one (device-resident input, no upload).
  array x = random_array({257});
  array xc = x;
  for (int i = 0; i < 30; ++i) {
    x = add(multiply(x, array(0.9f), Device::gpu), array(0.05f), Device::gpu);
    xc = add(multiply(xc, array(0.9f), Device::cpu), array(0.05f), Device::cpu);
    eval(x);
  }
  eval(xc);
  expect_close(x, xc, 1e-5, "feedback");
}

TEST_F(GpuGraphs, LongChainIsCut) {
  const auto max_nodes = cuda::graph_settings().max_nodes.load();
  cuda::graph_settings().max_nodes = 64;
  array x = random_array({100}), xc = x;
  for (int i = 0; i < 500; ++i) {
    x = (i % 2) ? sin(x, Device::gpu) : add(x, array(0.25f), Device::gpu);
    xc = (i % 2) ? sin(xc, Device::cpu) : add(xc, array(0.25f), Device::cpu);
  }
  auto before = cuda::graph_stats();
  eval(x, xc);
  auto after = cuda::graph_stats();
  cuda::graph_settings().max_nodes = max_nodes;
  EXPECT_GE(after.launched, before.launched + 7);
  expect_close(x, xc, 1e-4, "chain");
}

TEST_F(GpuGraphs, StreamsJoinInsideBatches) {
  Stream s1 = new_stream(Device::gpu), s2 = new_stream(Device::gpu);
  array x = random_array({300, 17});
  array a = exp(multiply(x, array(0.5f), s1), s1);          // batch on s1
  array b = sum(add(a, array(1.f), s2), 1, false, s2);      // batch on s2, waits on s1
  array c = add(log(a, s1), reshape(b, {300, 1}, s1), s1);  // back on s1, waits on s2
  array xc = x;
  array ac = exp(multiply(xc, array(0.5f)), Device::cpu);
  array bc = sum(add(ac, array(1.f)), 1, false, Device::cpu);
  array cc = add(log(ac), reshape(bc, {300, 1}));
  eval(c, cc);
  expect_close(c, cc, 1e-4, "streams");
}

TEST_F(GpuGraphs, FailureInsideABatchFallsBackEagerly) {
  array src = random_array({1 << 22});
  eval(src);
  synchronize();
  auto before = cuda::graph_stats();
  // The third node's output cannot be allocated under the limit.
  array a = add(src, array(1.f), Device::gpu);
  array b = multiply(a, array(2.f), Device::gpu);
  array c = exp(b, Device::gpu);
  size_t old = set_memory_limit(get_active_memory() + (size_t{4} << 20) * 2 + (1 << 20));
  try {
    eval(c);
    ADD_FAILURE() << "expected an out-of-memory error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("memory limit"), std::string::npos) << e.what();
  }
  set_memory_limit(old);
  synchronize();
  EXPECT_GE(cuda::graph_stats().fallbacks, before.fallbacks + 1);
  // The stream still works, with graphs.
  array d = add(multiply(src, array(3.f), Device::gpu), array(1.f), Device::gpu);
  array dc = add(multiply(src, array(3.f), Device::cpu), array(1.f), Device::cpu);
  eval(d, dc);
  expect_close(d, dc, 1e-6, "after failure");
}

// A later node of the batch reads an output of a multi-output node that is
// not the one standing for it in the batch: the batch must not wait for
// itself (it did, before session 10, and hung).
TEST_F(GpuGraphs, LaterNodesReadEveryOutputOfAMultiOutputNode) {
  array w = random_array({32, 128});
  auto run = [&](Device d) {
    auto q = quantize(w, 64, 4, "affine", std::nullopt, d);
    array y = add(multiply(q[1], array(2.f), d), q[2], d);
    return add(y, astype(sum(q[0], d), float32, d), d);
  };
  array gpu = run(Device::gpu), cpu = run(Device::cpu);
  eval(gpu, cpu);
  expect_close(gpu, cpu, 1e-6, "quantize outputs in one batch");
}

}  // namespace
}  // namespace kiln::test

namespace kiln::test {
namespace {

TEST_F(GpuGraphs, HostRunningAheadStaysWithinMemory) {
  // 40 casts over 256 MiB arrays: no output can reuse its input's buffer, so
  // a host that queues them all at once would hold ~7 GiB of inputs for the
  // queued kernels. Back-pressure keeps that near 2 GiB, under this limit.
  array x = random::uniform({1 << 26}, float32, std::nullopt, Device::gpu);
  eval(x);
  synchronize();
  size_t old = set_memory_limit(get_active_memory() + (size_t{4} << 30));
  array y = x;
  for (int i = 0; i < 20; ++i) y = astype(astype(y, float16, Device::gpu), float32, Device::gpu);
  EXPECT_NO_THROW(eval(y));
  set_memory_limit(old);
  array yc = astype(astype(x, float16, Device::cpu), float32, Device::cpu);
  eval(yc);
  expect_close(y, yc, 0, "casts");
  synchronize();
}

}  // namespace
// A Llama-shaped model small enough to decode many steps in a test.
static llm::ModelConfig small_llama(int vocab, int layers) {
  llm::ModelConfig c;
  c.vocab_size = vocab;
  c.hidden_size = 128;
  c.intermediate_size = 256;
  c.num_layers = layers;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  return c;
}

TEST_F(GpuGraphs, CompiledDecodeStepsReuseTheirExecutables) {
  // The compiled decode step (llm::Decoder) replays its CUDA graphs: after
  // the first steps (constants evaluated, the position an array on the
  // device, the plans' variants recorded) every step finds them cached and
  // most launch without being recorded (graph_plan.h).
  llm::Model m = llm::Model::random(small_llama(160, 2), 41);
  StreamContext ctx(Device::gpu);
  auto caches = m.make_caches();
  array token = astype(argmax(m.forward(array({3, 14, 15, 92, 65}, {1, 5}), caches, true), -1), int32);
  llm::Decoder dec(m, std::move(caches));
  cuda::GraphStats warm{};
  for (int i = 0; i < 40; ++i) {
    token = dec.step(token).second;
    eval(token);
    if (i == 9) warm = cuda::graph_stats();
  }
  const cuda::GraphStats end = cuda::graph_stats();
  EXPECT_EQ(dec.traces(), 1);
  EXPECT_EQ(end.instantiated, warm.instantiated) << "a decode step built a new CUDA graph";
  EXPECT_GE(end.launched, warm.launched + 30);  // at least one graph per step
  EXPECT_GE(end.replayed, warm.replayed + 25) << "decode steps should replay their graphs";
  EXPECT_EQ(end.fallbacks, warm.fallbacks);
}

// Greedy generation queues step t + 1 before reading token t back: the
// steps still replay (the cache written in place while the step before it
// runs, the plans' buffers taken in turn), and the tokens are those of the
// uncompiled decode, op by op.
TEST_F(GpuGraphs, PipelinedGreedyDecodeReplays) {
  llm::Model m = llm::Model::random(small_llama(200, 3), 7);
  auto run = [&](bool compiled) {
    llm::GenerateOptions opt;
    opt.max_tokens = 60;
    opt.stream = Device::gpu;
    opt.compile = compiled;
    std::vector<int32_t> ids;
    llm::generate(m, {5, 17, 101, 3}, opt, [&](int32_t t) {
      ids.push_back(t);
      return true;
    });
    return ids;
  };
  const std::vector<int32_t> eager = run(false);
  const auto before = cuda::graph_stats();
  const std::vector<int32_t> compiled = run(true);
  const auto after = cuda::graph_stats();
  ASSERT_EQ(compiled.size(), eager.size());
  // (The first 16 as the CPU's LlmDecoder test; later ones may part on a near tie.)
  EXPECT_EQ(std::vector<int32_t>(compiled.begin(), compiled.begin() + 16),
            std::vector<int32_t>(eager.begin(), eager.begin() + 16));
  EXPECT_GE(after.replayed, before.replayed + 40) << "pipelined decode steps should replay their graphs";
}

// As `kiln bench llm` decodes: Q4_K blocks, bfloat16 activations, q/k/v
// and gate/up stacked, a one-token prompt, generate called again on the
// same model (new caches and slots each time).
TEST_F(GpuGraphs, QuantizedBf16GreedyDecodeReplays) {
  llm::ModelConfig c = small_llama(512, 2);
  c.hidden_size = 256;
  c.intermediate_size = 512;
  llm::Model m = llm::Model::random(c, 3, bfloat16, "q4_k");
  {
    StreamContext ctx(Device::gpu);
    m.fuse_projections();
  }
  m.set_activation_dtype(bfloat16);
  llm::GenerateOptions opt;
  opt.max_tokens = 40;
  opt.stream = Device::gpu;
  uint64_t replayed = 0;
  for (int run = 0; run < 3; ++run) {
    const auto before = cuda::graph_stats();
    llm::generate(m, {run + 1}, opt, [](int32_t) { return true; });
    replayed = cuda::graph_stats().replayed - before.replayed;
  }
  EXPECT_GE(replayed, 25u) << "a repeated quantized decode should replay its step's graphs";
}

}  // namespace kiln::test
