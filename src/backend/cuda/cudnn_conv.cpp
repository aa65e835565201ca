// Convolution through cuDNN (kiln bench row D3 conv2d), loaded at run time.
//
// Why: for 16-bit convolutions cuDNN's implicit-GEMM kernels never write the
// patch matrix. On the D3 row (32x56x56x64 -> 64, 3x3, bf16) im2col +
// cuBLASLt (conv.cu) needs 147 us, most of it a GEMM with N = 64 that
// cuBLASLt's kernels serve at ~1 TB/s; this path runs it in 49-52 us (torch
// reaches 26-36 us through cuDNN's graph API, on the H200). cuDNN ships with the CUDA
// toolkit image and with PyTorch's wheels, but not everywhere Kiln runs, so it
// is opened with dlopen("libcudnn.so.9") on first use; when it is absent, or
// the problem is outside what this path takes, conv.cu's own kernels run.
//
// What this path takes: float16 / bfloat16 (float32 stays on conv.cu, which
// measured level with cuDNN there and keeps float32 exact: no TF32), 1 to 3
// spatial axes (1-D as 2-D with H = 1), row-contiguous channels-last input
// and weight (Kiln's [N, S.., C] and [O, K.., Cg] are cuDNN's NHWC tensors and
// NHWC filters), no input dilation (transposed convolutions), and padding
// that cuDNN's symmetric padding reproduces (the output sizes must agree;
// positions past them are never read). Flip is CUDNN_CONVOLUTION. The
// algorithm is picked once per problem by timing cuDNN's candidates
// (cudnnFindConvolutionForwardAlgorithmEx, on the first call's operands; the
// heuristic's first choice, cudnnGetConvolutionForwardAlgorithm_v7, ran the
// D3 row in 55 us). A stream being captured into a CUDA graph gets cuDNN
// only once the handle and the plan exist (building them allocates, times
// and synchronizes). KILN_CUDA_CUDNN=0 turns the path off.
#include "backend/cuda/cudnn_conv.h"
#include "backend/cuda/cudnn_lib.h"

#include <cuda_runtime.h>

#include <array>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/cuda/cuda_common.h"
#include "core/ops_util.h"

#if __has_include(<cudnn.h>)
#include <cudnn.h>
#define KILN_HAVE_CUDNN_HEADERS 1
#endif

namespace kiln::cuda {

#ifndef KILN_HAVE_CUDNN_HEADERS

bool cudnn_conv(const array&, const char*, const array&, const char*, const conv::Geometry&, char*, cudaStream_t) {
  return false;
}

#else

namespace {

// The cuDNN entry points this file uses, resolved from the loaded library.
struct Api {
  decltype(&cudnnCreate) create;
  decltype(&cudnnSetStream) set_stream;
  decltype(&cudnnCreateTensorDescriptor) create_tensor;
  decltype(&cudnnSetTensorNdDescriptor) set_tensor;
  decltype(&cudnnCreateFilterDescriptor) create_filter;
  decltype(&cudnnSetFilterNdDescriptor) set_filter;
  decltype(&cudnnCreateConvolutionDescriptor) create_conv;
  decltype(&cudnnSetConvolutionNdDescriptor) set_conv;
  decltype(&cudnnSetConvolutionGroupCount) set_groups;
  decltype(&cudnnSetConvolutionMathType) set_math;
  decltype(&cudnnGetConvolutionNdForwardOutputDim) output_dim;
  decltype(&cudnnGetConvolutionForwardAlgorithm_v7) find_algo;
  decltype(&cudnnFindConvolutionForwardAlgorithmEx) time_algos;
  decltype(&cudnnConvolutionForward) forward;
  cudnnHandle_t handle = nullptr;
};

// The library and a handle, or nullptr where cuDNN cannot be loaded (or is
// turned off). Built once.
const Api* api() {
  static const Api* loaded = []() -> const Api* {
    void* lib = cudnn_library();
    if (!lib) return nullptr;
    auto* a = new Api{};
    bool ok = true;
    auto bind = [&](auto& fn, const char* name) { ok = bind_cudnn(lib, fn, name) && ok; };
    bind(a->create, "cudnnCreate");
    bind(a->set_stream, "cudnnSetStream");
    bind(a->create_tensor, "cudnnCreateTensorDescriptor");
    bind(a->set_tensor, "cudnnSetTensorNdDescriptor");
    bind(a->create_filter, "cudnnCreateFilterDescriptor");
    bind(a->set_filter, "cudnnSetFilterNdDescriptor");
    bind(a->create_conv, "cudnnCreateConvolutionDescriptor");
    bind(a->set_conv, "cudnnSetConvolutionNdDescriptor");
    bind(a->set_groups, "cudnnSetConvolutionGroupCount");
    bind(a->set_math, "cudnnSetConvolutionMathType");
    bind(a->output_dim, "cudnnGetConvolutionNdForwardOutputDim");
    bind(a->find_algo, "cudnnGetConvolutionForwardAlgorithm_v7");
    bind(a->time_algos, "cudnnFindConvolutionForwardAlgorithmEx");
    bind(a->forward, "cudnnConvolutionForward");
    if (!ok || a->create(&a->handle) != CUDNN_STATUS_SUCCESS) {
      delete a;
      return nullptr;
    }
    return a;
  }();
  return loaded;
}

// One problem's descriptors and algorithm; `usable` is false where cuDNN
// declined it (then conv.cu runs, and the answer is remembered).
struct Plan {
  bool usable = false;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnConvolutionFwdAlgo_t algo{};
  size_t workspace = 0;
};

// dtype, nd, N, C, O, groups, flip, then in, out, k, stride, pad, dilation per axis.
using Key = std::array<int64_t, 7 + 6 * conv::kMaxSpatial>;

constexpr size_t kMaxWorkspace = size_t{256} << 20;

// Builds the plan for g (dtype t); every cuDNN refusal leaves it unusable.
// The algorithm: the fastest of cuDNN's candidates timed on this call's
// operands (the output is overwritten by each trial, the inputs only read),
// else the heuristic's first choice.
std::unique_ptr<Plan> make_plan(const Api& a, Dtype t, const conv::Geometry& g, const char* px, const char* pw,
                                char* po, cudaStream_t s) {
  auto p = std::make_unique<Plan>();
  const cudnnDataType_t dt = t == Dtype::bfloat16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
  // Spatial axes as cuDNN sees them: a 1-D problem gets a leading H = 1.
  const int ns = g.nd == 1 ? 2 : g.nd;
  const int lead = ns - g.nd;
  std::vector<int> in(ns, 1), out(ns, 1), k(ns, 1), pad(ns, 0), stride(ns, 1), dil(ns, 1);
  for (int d = 0; d < g.nd; ++d) {
    in[lead + d] = static_cast<int>(g.in[d]);
    out[lead + d] = static_cast<int>(g.out[d]);
    k[lead + d] = static_cast<int>(g.k[d]);
    pad[lead + d] = static_cast<int>(g.pad_lo[d]);
    stride[lead + d] = static_cast<int>(g.stride[d]);
    dil[lead + d] = static_cast<int>(g.kdil[d]);
  }
  // NHWC dims in cuDNN's N, C, spatial order with channels-last strides.
  auto nhwc = [&](int64_t n, int64_t c, const std::vector<int>& s, std::vector<int>& dims, std::vector<int>& st) {
    dims = {static_cast<int>(n), static_cast<int>(c)};
    dims.insert(dims.end(), s.begin(), s.end());
    st.assign(dims.size(), 1);
    int64_t run = c;
    for (int d = ns - 1; d >= 0; --d) {
      st[2 + d] = static_cast<int>(run);
      run *= s[d];
    }
    st[0] = static_cast<int>(run);
  };
  std::vector<int> xd, xst, yd, yst;
  nhwc(g.N, g.C, in, xd, xst);
  nhwc(g.N, g.O, out, yd, yst);
  std::vector<int> wd = {static_cast<int>(g.O), static_cast<int>(g.Cg)};
  wd.insert(wd.end(), k.begin(), k.end());
  const int nb = ns + 2;
  bool ok = a.create_tensor(&p->x) == CUDNN_STATUS_SUCCESS && a.create_tensor(&p->y) == CUDNN_STATUS_SUCCESS &&
            a.create_filter(&p->w) == CUDNN_STATUS_SUCCESS && a.create_conv(&p->conv) == CUDNN_STATUS_SUCCESS;
  ok = ok && a.set_tensor(p->x, dt, nb, xd.data(), xst.data()) == CUDNN_STATUS_SUCCESS;
  ok = ok && a.set_tensor(p->y, dt, nb, yd.data(), yst.data()) == CUDNN_STATUS_SUCCESS;
  ok = ok && a.set_filter(p->w, dt, CUDNN_TENSOR_NHWC, nb, wd.data()) == CUDNN_STATUS_SUCCESS;
  ok = ok && a.set_conv(p->conv, ns, pad.data(), stride.data(), dil.data(),
                        g.flip ? CUDNN_CONVOLUTION : CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT) == CUDNN_STATUS_SUCCESS;
  ok = ok && a.set_groups(p->conv, static_cast<int>(g.groups)) == CUDNN_STATUS_SUCCESS;
  ok = ok && a.set_math(p->conv, CUDNN_TENSOR_OP_MATH) == CUDNN_STATUS_SUCCESS;
  if (ok) {
    // Symmetric padding must give Kiln's output sizes.
    std::vector<int> got(nb, 0);
    ok = a.output_dim(p->conv, p->x, p->w, nb, got.data()) == CUDNN_STATUS_SUCCESS && got == yd;
  }
  if (ok) {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int found = 0;
    void* ws = scratch(kMaxWorkspace, "conv");
    ok = a.set_stream(a.handle, s) == CUDNN_STATUS_SUCCESS &&
         a.time_algos(a.handle, p->x, px, p->w, pw, p->conv, p->y, po, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf,
                      ws, kMaxWorkspace) == CUDNN_STATUS_SUCCESS;
    if (!ok || found == 0) {
      ok = a.find_algo(a.handle, p->x, p->w, p->conv, p->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf) ==
           CUDNN_STATUS_SUCCESS;
    }
    bool picked = false;
    for (int i = 0; ok && i < found && !picked; ++i) {
      if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= kMaxWorkspace) {
        p->algo = perf[i].algo;
        p->workspace = perf[i].memory;
        picked = true;
      }
    }
    ok = ok && picked;
  }
  p->usable = ok;
  return p;
}

}  // namespace

bool cudnn_conv(const array& x, const char* px, const array& w, const char* pw, const conv::Geometry& g, char* po,
                cudaStream_t s) {
  const Dtype t = x.dtype();
  if (t != Dtype::bfloat16 && t != Dtype::float16) return false;
  for (int d = 0; d < g.nd; ++d) {
    if (g.idil[d] != 1) return false;
  }
  if (!detail::is_row_contiguous(x.shape(), x.desc()->strides) ||
      !detail::is_row_contiguous(w.shape(), w.desc()->strides)) {
    return false;
  }
  // cuDNN's descriptors take int sizes; its NHWC tensors want aligned bases.
  if (static_cast<int64_t>(x.size()) >= (int64_t{1} << 31) || reinterpret_cast<uintptr_t>(px) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(pw) % 16 != 0 || reinterpret_cast<uintptr_t>(po) % 16 != 0) {
    return false;
  }
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &capture) != cudaSuccess) return false;
  const bool capturing = capture != cudaStreamCaptureStatusNone;

  static std::mutex mutex;
  static auto* plans = new std::map<Key, std::unique_ptr<Plan>>();
  static bool loaded = false;
  std::lock_guard lock(mutex);
  if (!loaded && capturing) return false;  // loading allocates: not inside a capture
  loaded = true;
  const Api* a = api();
  if (!a) return false;
  Key key{static_cast<int64_t>(t), g.nd, g.N, g.C, g.O, g.groups, g.flip};
  size_t at = 7;
  for (int d = 0; d < conv::kMaxSpatial; ++d) {
    for (int64_t v : {g.in[d], g.out[d], g.k[d], g.stride[d], g.pad_lo[d], g.kdil[d]}) key[at++] = v;
  }
  auto it = plans->find(key);
  if (it == plans->end()) {
    if (capturing) return false;
    it = plans->emplace(key, make_plan(*a, t, g, px, pw, po, s)).first;
  }
  Plan& p = *it->second;
  if (!p.usable) return false;
  void* ws = p.workspace ? scratch(p.workspace, "conv") : nullptr;
  const float one = 1.f, zero = 0.f;
  cudnnStatus_t st = a->set_stream(a->handle, s);
  if (st == CUDNN_STATUS_SUCCESS) {
    st = a->forward(a->handle, &one, p.x, px, p.w, pw, p.conv, p.algo, ws, p.workspace, &zero, p.y, po);
  }
  if (st != CUDNN_STATUS_SUCCESS) {
    // cuDNN refused the call (seen on the H200: CUDNN_STATUS_BAD_PARAM for
    // an algorithm cudnnFind had timed as working, on small problems with
    // 8 channels a group, where the timing picks among near-equal
    // candidates at random): this problem goes to conv.cu from now on, which
    // writes every output element whatever cuDNN left there.
    p.usable = false;
    return false;
  }
  return true;
}

#endif

}  // namespace kiln::cuda
