// Prefill attention through cuDNN's fused flash-attention engine (kiln bench
// rows sdpa_prefill, sdpa_prefill_causal), loaded at run time.
//
// Why: Kiln's own prefill kernel (attention_prefill.cu, mma.sync) reaches
// ~210 TFLOP/s on the H200, where Hopper's wgmma + TMA kernels (what
// FlashAttention-3 and cuDNN run) reach 550-670: on b1 h32/8 s4096 d128
// bf16, causal 0.25 ms and full 0.41 ms here against 0.66 and 1.29 ms.
// cuDNN ships with PyTorch's wheels and the CUDA images but not everywhere
// Kiln runs, so it is opened with dlopen("libcudnn.so.9") on first use
// (KILN_CUDA_CUDNN=0 turns it off, as for convolutions).
//
// The problem is described to cuDNN's graph API as the operations of
// attention, which its runtime-fusion engine recognizes and compiles into
// one kernel: S = Q K^T (K given as a transposed view, no copy), S * scale,
// the causal mask (generated row and column indices, row + (Skv - Sq) >= col,
// select -inf elsewhere), max, subtract, exp, sum, the log-sum-exp branch
// the engine's pattern requires even for inference (into a virtual tensor),
// P = E / sum rounded to the input type, O = P V. Grouped-query attention is
// the K/V head count alone. cuDNN compiles a kernel per shape (plan builds
// measured 40 ms to 1.1 s), so a shape's plan is built on its second request
// and cached; the first request, shapes the engine declines, masks given as
// arrays, attention sinks, q_len > kv_len with a causal mask (Kiln averages V
// for rows that see no key) and float32 stay on attention_prefill.cu.
// Building allocates and compiles: inside a CUDA-graph capture it throws, so
// that the batch runs eagerly once (device.cpp) and later captures find the
// plan.
#include "backend/cuda/cudnn_attention.h"
#include "backend/cuda/cudnn_lib.h"

#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/cuda/cuda_common.h"
#include "kiln/error.h"

#if __has_include(<cudnn.h>)
#include <cudnn.h>
#define KILN_HAVE_CUDNN_HEADERS 1
#endif

namespace kiln::cuda {

namespace {
std::atomic<uint64_t> runs{0};
std::atomic<bool> library{false};
}  // namespace

uint64_t cudnn_sdpa_runs() { return runs.load(); }
bool cudnn_sdpa_loaded() { return library.load(); }

#ifndef KILN_HAVE_CUDNN_HEADERS

bool cudnn_sdpa(const SdpaParams&, Dtype, cudaStream_t) { return false; }

#else

namespace {

struct Api {
  decltype(&cudnnCreate) create;
  decltype(&cudnnSetStream) set_stream;
  decltype(&cudnnGetVersion) version;
  decltype(&cudnnBackendCreateDescriptor) create_desc;
  decltype(&cudnnBackendDestroyDescriptor) destroy_desc;
  decltype(&cudnnBackendSetAttribute) set;
  decltype(&cudnnBackendGetAttribute) get;
  decltype(&cudnnBackendFinalize) finalize;
  decltype(&cudnnBackendExecute) execute;
  cudnnHandle_t handle = nullptr;
};

const Api* api() {
  static const Api* loaded = []() -> const Api* {
    void* lib = cudnn_library();
    if (!lib) return nullptr;
    auto* a = new Api{};
    bool ok = true;
    auto bind = [&](auto& fn, const char* name) { ok = bind_cudnn(lib, fn, name) && ok; };
    bind(a->create, "cudnnCreate");
    bind(a->set_stream, "cudnnSetStream");
    bind(a->version, "cudnnGetVersion");
    bind(a->create_desc, "cudnnBackendCreateDescriptor");
    bind(a->destroy_desc, "cudnnBackendDestroyDescriptor");
    bind(a->set, "cudnnBackendSetAttribute");
    bind(a->get, "cudnnBackendGetAttribute");
    bind(a->finalize, "cudnnBackendFinalize");
    bind(a->execute, "cudnnBackendExecute");
    // -inf as the mask's fill value needs 9.10; 9.10.0 and 9.10.1 refuse
    // 16-bit attention (cudnn-frontend's checks).
    if (!ok || a->version() < 91002 || a->create(&a->handle) != CUDNN_STATUS_SUCCESS) {
      delete a;
      return nullptr;
    }
    return a;
  }();
  return loaded;
}

enum class Mask : int { none, causal_top_left, causal_bottom_right };

// A finalized plan and every descriptor it was built from (they must
// outlive it).
struct Plan {
  const Api* a = nullptr;
  std::vector<cudnnBackendDescriptor_t> descs;
  cudnnBackendDescriptor_t plan = nullptr;
  int64_t workspace = 0;
  bool usable = false;
  ~Plan() {
    if (plan) a->destroy_desc(plan);
    for (auto it = descs.rbegin(); it != descs.rend(); ++it) a->destroy_desc(*it);
  }
};

// UIDs of the tensors the caller supplies (the variant pack); virtual
// tensors are numbered from kFirstVirtual.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kScale, kNegInf, kSkv, kSq, kFirstVirtual = 100 };

// Builds one operation graph; any refusal clears `ok` and later calls do
// nothing.
class Builder {
 public:
  explicit Builder(Plan& p) : p_(p), a_(*p.a) {}
  bool ok = true;

  cudnnBackendDescriptor_t make(cudnnBackendDescriptorType_t type) {
    cudnnBackendDescriptor_t d = nullptr;
    if (!ok || a_.create_desc(type, &d) != CUDNN_STATUS_SUCCESS) {
      ok = false;
      return nullptr;
    }
    p_.descs.push_back(d);
    return d;
  }
  void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
           int64_t count, const void* value) {
    ok = ok && a_.set(d, name, type, count, value) == CUDNN_STATUS_SUCCESS;
  }
  void finish(cudnnBackendDescriptor_t d) { ok = ok && a_.finalize(d) == CUDNN_STATUS_SUCCESS; }

  cudnnBackendDescriptor_t tensor(cudnnDataType_t dt, std::array<int64_t, 4> dims, std::array<int64_t, 4> strides,
                                  int64_t uid, bool is_virtual = false, bool by_value = false) {
    cudnnBackendDescriptor_t d = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t align = 16;
    const bool yes = true;
    set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    set(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data());
    set(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data());
    set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    if (is_virtual) set(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &yes);
    if (by_value) set(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes);
    finish(d);
    return d;
  }
  cudnnBackendDescriptor_t scalar(cudnnDataType_t dt, int64_t uid) {
    return tensor(dt, {1, 1, 1, 1}, {1, 1, 1, 1}, uid, false, true);
  }
  cudnnBackendDescriptor_t virt(cudnnDataType_t dt, std::array<int64_t, 4> dims) {
    std::array<int64_t, 4> st{dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1};
    return tensor(dt, dims, st, next_uid_++, true);
  }

  void pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t prec, cudnnBackendDescriptor_t x,
                 cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t t = nullptr,
                 int64_t axis = -1) {
    cudnnBackendDescriptor_t pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (axis >= 0) set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    finish(pw);
    cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    if (b) set(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    if (t) set(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t);
    finish(op);
    ops.push_back(op);
  }
  void reduction(cudnnReduceTensorOp_t how, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t r = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    const cudnnDataType_t f = CUDNN_DATA_FLOAT;
    set(r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f);
    set(r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &how);
    finish(r);
    cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    set(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r);
    set(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    set(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    finish(op);
    ops.push_back(op);
  }
  void matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c) {
    cudnnBackendDescriptor_t m = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    const cudnnDataType_t f = CUDNN_DATA_FLOAT;
    set(m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f);
    finish(m);
    cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    set(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a);
    set(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    set(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
    set(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &m);
    finish(op);
    ops.push_back(op);
  }

  std::vector<cudnnBackendDescriptor_t> ops;

 private:
  Plan& p_;
  const Api& a_;
  int64_t next_uid_ = kFirstVirtual;
};

// The attention graph of p (see the top of the file) and its plan: the
// first engine configuration of cuDNN's heuristics that finalizes.
std::unique_ptr<Plan> make_plan(const Api& a, const SdpaParams& p, Dtype t, Mask mask) {
  auto plan = std::make_unique<Plan>();
  plan->a = &a;
  Builder g(*plan);
  const cudnnDataType_t io = t == Dtype::bfloat16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT, i32 = CUDNN_DATA_INT32, b8 = CUDNN_DATA_BOOLEAN;
  const int64_t B = p.batch, H = p.n_q_heads, Hk = p.n_kv_heads, Sq = p.q_len, Sk = p.kv_len, D = p.head_dim;
  auto q = g.tensor(io, {B, H, Sq, D}, {p.q_strides[0], p.q_strides[1], p.q_strides[2], 1}, kQ);
  // K^T as a view: dims [B, Hk, D, Sk], K's strides with the last two swapped.
  auto kt = g.tensor(io, {B, Hk, D, Sk}, {p.k_strides[0], p.k_strides[1], 1, p.k_strides[2]}, kK);
  auto v = g.tensor(io, {B, Hk, Sk, D}, {p.v_strides[0], p.v_strides[1], p.v_strides[2], 1}, kV);
  auto o = g.tensor(io, {B, H, Sq, D}, {H * Sq * D, Sq * D, D, 1}, kO);
  auto scale = g.scalar(f32, kScale);
  const std::array<int64_t, 4> full{B, H, Sq, Sk}, rows{B, H, Sq, 1};

  auto s1 = g.virt(f32, full);
  g.matmul(q, kt, s1);
  auto s2 = g.virt(f32, full);
  g.pointwise(CUDNN_POINTWISE_MUL, f32, s1, scale, s2);
  auto scores = s2;
  if (mask != Mask::none) {
    auto row = g.virt(i32, full), col = g.virt(i32, full);
    g.pointwise(CUDNN_POINTWISE_GEN_INDEX, f32, s2, nullptr, row, nullptr, 2);
    g.pointwise(CUDNN_POINTWISE_GEN_INDEX, f32, s2, nullptr, col, nullptr, 3);
    if (mask == Mask::causal_bottom_right) {
      auto skv = g.scalar(i32, kSkv), sq = g.scalar(i32, kSq);
      auto shifted = g.virt(i32, full), row2 = g.virt(i32, full);
      g.pointwise(CUDNN_POINTWISE_ADD, i32, row, skv, shifted);
      g.pointwise(CUDNN_POINTWISE_SUB, i32, shifted, sq, row2);
      row = row2;
    }
    auto keep = g.virt(b8, full);
    g.pointwise(CUDNN_POINTWISE_CMP_GE, b8, row, col, keep);
    auto neg_inf = g.scalar(f32, kNegInf);
    auto masked = g.virt(f32, full);
    g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, f32, s2, neg_inf, masked, keep);
    scores = masked;
  }
  auto mx = g.virt(f32, rows);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, scores, mx);
  auto z = g.virt(f32, full), e = g.virt(f32, full);
  g.pointwise(CUDNN_POINTWISE_SUB, f32, scores, mx, z);
  g.pointwise(CUDNN_POINTWISE_EXP, f32, z, nullptr, e);
  auto sum = g.virt(f32, rows);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum);
  auto lg = g.virt(f32, rows), stats = g.virt(f32, rows);
  g.pointwise(CUDNN_POINTWISE_LOG, f32, sum, nullptr, lg);
  g.pointwise(CUDNN_POINTWISE_ADD, f32, mx, lg, stats);
  auto prob = g.virt(io, full);
  g.pointwise(CUDNN_POINTWISE_DIV, f32, e, sum, prob);
  g.matmul(prob, v, o);

  auto graph = g.make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  g.set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(g.ops.size()),
        g.ops.data());
  // Marked deprecated in 9.19's header; without it 9.14's heuristics find
  // no engine.
  g.set(graph, static_cast<cudnnBackendAttributeName_t>(800), CUDNN_TYPE_HANDLE, 1, &a.handle);
  g.finish(graph);
  auto heur = g.make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  g.set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
  g.set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  g.finish(heur);
  if (!g.ok) return plan;
  int64_t n = 0;
  if (a.get(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, nullptr) !=
          CUDNN_STATUS_SUCCESS ||
      n <= 0) {
    return plan;
  }
  std::vector<cudnnBackendDescriptor_t> cfgs;
  for (int64_t i = 0; i < n; ++i) cfgs.push_back(g.make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
  if (!g.ok || a.get(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &n, cfgs.data()) !=
                   CUDNN_STATUS_SUCCESS) {
    return plan;
  }
  for (int64_t i = 0; i < n && !plan->usable; ++i) {
    cudnnBackendDescriptor_t ep = nullptr;
    if (a.create_desc(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &ep) != CUDNN_STATUS_SUCCESS) break;
    int64_t ws = 0, count = 0;
    if (a.set(ep, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]) ==
            CUDNN_STATUS_SUCCESS &&
        a.finalize(ep) == CUDNN_STATUS_SUCCESS &&
        a.get(ep, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &count, &ws) ==
            CUDNN_STATUS_SUCCESS) {
      plan->plan = ep;
      plan->workspace = ws;
      plan->usable = true;
    } else {
      a.destroy_desc(ep);
    }
  }
  return plan;
}

// dtype, mask, B, Hq, Hkv, Sq, Skv, D, then the strides of q, k, v.
using Key = std::array<int64_t, 17>;

struct Entry {
  int requests = 0;
  std::unique_ptr<Plan> plan;  // built on the second request
};

// Plans kept at most (each holds compiled kernels): later new shapes run
// attention_prefill.cu.
constexpr size_t kMaxPlans = 64;
constexpr size_t kMaxShapes = 4096;

}  // namespace

bool cudnn_sdpa(const SdpaParams& p, Dtype t, cudaStream_t s) {
  if (t != Dtype::bfloat16 && t != Dtype::float16) return false;
  if (p.mask || p.sinks || p.head_dim % 8 != 0 || p.head_dim > 256) return false;
  if (p.causal && p.q_len > p.kv_len) return false;
  const Mask mask = !p.causal ? Mask::none : p.q_len == p.kv_len ? Mask::causal_top_left : Mask::causal_bottom_right;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &capture) != cudaSuccess) return false;
  const bool capturing = capture != cudaStreamCaptureStatusNone;

  static std::mutex mutex;
  static auto* entries = new std::map<Key, Entry>();
  static size_t built = 0;
  std::lock_guard lock(mutex);
  Key key{static_cast<int64_t>(t), static_cast<int64_t>(mask), p.batch, p.n_q_heads, p.n_kv_heads, p.q_len,
          p.kv_len, p.head_dim};
  for (int i = 0; i < 3; ++i) {
    key[8 + i] = p.q_strides[i];
    key[11 + i] = p.k_strides[i];
    key[14 + i] = p.v_strides[i];
  }
  auto found = entries->find(key);
  if (found == entries->end()) {
    // Shapes seen once are remembered up to a bound (a server sees a new
    // prompt length at every request).
    if (entries->size() >= kMaxShapes) return false;
    found = entries->emplace(key, Entry{}).first;
  }
  Entry& entry = found->second;
  if (!entry.plan) {
    if (++entry.requests < 2 || built >= kMaxPlans) return false;
    // Loading the library and building the plan allocate and compile: not
    // inside a capture. The batch then runs eagerly (device.cpp), and this
    // call comes back without a capture.
    if (capturing) {
      --entry.requests;
      throw Error("[scaled_dot_product_attention] the cuDNN plan is built outside CUDA-graph capture");
    }
    const Api* a = api();
    library = a != nullptr;
    if (!a) {
      built = kMaxPlans;  // no library: stop asking
      return false;
    }
    entry.plan = make_plan(*a, p, t, mask);
    ++built;
  }
  Plan& plan = *entry.plan;
  if (!plan.usable) return false;
  const Api& a = *plan.a;
  void* ws = plan.workspace > 0 ? scratch(static_cast<size_t>(plan.workspace), "scaled_dot_product_attention") : nullptr;
  // Host values the engine reads at each execute (frozen into a captured graph).
  const float scale = p.scale, neg_inf = -INFINITY;
  const int32_t skv = p.kv_len, sq = p.q_len;
  std::vector<int64_t> uids{kQ, kK, kV, kO, kScale};
  std::vector<void*> ptrs{const_cast<void*>(p.q), const_cast<void*>(p.k), const_cast<void*>(p.v), p.out,
                          const_cast<float*>(&scale)};
  if (mask != Mask::none) {
    uids.push_back(kNegInf);
    ptrs.push_back(const_cast<float*>(&neg_inf));
  }
  if (mask == Mask::causal_bottom_right) {
    uids.insert(uids.end(), {kSkv, kSq});
    ptrs.push_back(const_cast<int32_t*>(&skv));
    ptrs.push_back(const_cast<int32_t*>(&sq));
  }
  cudnnBackendDescriptor_t pack = nullptr;
  bool ok = a.create_desc(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack) == CUDNN_STATUS_SUCCESS;
  ok = ok && a.set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()),
                   uids.data()) == CUDNN_STATUS_SUCCESS;
  ok = ok && a.set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                   static_cast<int64_t>(ptrs.size()), ptrs.data()) == CUDNN_STATUS_SUCCESS;
  ok = ok && a.set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws) == CUDNN_STATUS_SUCCESS;
  ok = ok && a.finalize(pack) == CUDNN_STATUS_SUCCESS;
  ok = ok && a.set_stream(a.handle, s) == CUDNN_STATUS_SUCCESS;
  ok = ok && a.execute(a.handle, plan.plan, pack) == CUDNN_STATUS_SUCCESS;
  if (pack) a.destroy_desc(pack);
  if (!ok) plan.usable = false;  // this shape goes to attention_prefill.cu from now on
  if (ok) ++runs;
  return ok;
}

#endif

}  // namespace kiln::cuda
