// oneDNN 2.x matmul, opened with dlopen (see onednn_peer.h).
#include "onednn_peer.h"

#include <dlfcn.h>

#include <type_traits>

#if __has_include(<oneapi/dnnl/dnnl.h>)
#include <oneapi/dnnl/dnnl.h>
#define KILN_HAVE_DNNL_HEADER 1
#endif

namespace kiln::bench {

#ifdef KILN_HAVE_DNNL_HEADER
namespace {

// The entry points used, looked up once.
struct Api {
  decltype(&dnnl_engine_create) engine_create = nullptr;
  decltype(&dnnl_engine_destroy) engine_destroy = nullptr;
  decltype(&dnnl_stream_create) stream_create = nullptr;
  decltype(&dnnl_stream_destroy) stream_destroy = nullptr;
  decltype(&dnnl_stream_wait) stream_wait = nullptr;
  decltype(&dnnl_memory_desc_init_by_tag) md_init = nullptr;
  decltype(&dnnl_matmul_desc_init) matmul_init = nullptr;
  decltype(&dnnl_primitive_desc_create) pd_create = nullptr;
  decltype(&dnnl_primitive_desc_destroy) pd_destroy = nullptr;
  decltype(&dnnl_primitive_desc_query) pd_query = nullptr;
  decltype(&dnnl_primitive_create) prim_create = nullptr;
  decltype(&dnnl_primitive_destroy) prim_destroy = nullptr;
  decltype(&dnnl_primitive_execute) execute = nullptr;
  decltype(&dnnl_memory_create) mem_create = nullptr;
  decltype(&dnnl_memory_destroy) mem_destroy = nullptr;
  bool ok = false;
};

const Api& api() {
  static const Api a = [] {
    Api r;
    void* lib = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return r;
    auto get = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      return fn != nullptr;
    };
    r.ok = get(r.engine_create, "dnnl_engine_create") && get(r.engine_destroy, "dnnl_engine_destroy") &&
           get(r.stream_create, "dnnl_stream_create") && get(r.stream_destroy, "dnnl_stream_destroy") &&
           get(r.stream_wait, "dnnl_stream_wait") && get(r.md_init, "dnnl_memory_desc_init_by_tag") &&
           get(r.matmul_init, "dnnl_matmul_desc_init") && get(r.pd_create, "dnnl_primitive_desc_create") &&
           get(r.pd_destroy, "dnnl_primitive_desc_destroy") && get(r.pd_query, "dnnl_primitive_desc_query") &&
           get(r.prim_create, "dnnl_primitive_create") && get(r.prim_destroy, "dnnl_primitive_destroy") &&
           get(r.execute, "dnnl_primitive_execute") && get(r.mem_create, "dnnl_memory_create") &&
           get(r.mem_destroy, "dnnl_memory_destroy");
    return r;
  }();
  return a;
}

}  // namespace

struct OnednnMatmul::State {
  dnnl_engine_t engine = nullptr;
  dnnl_stream_t stream = nullptr;
  dnnl_primitive_desc_t pd = nullptr;
  dnnl_primitive_t prim = nullptr;
  dnnl_memory_t mem[3] = {nullptr, nullptr, nullptr};
};

std::unique_ptr<OnednnMatmul> OnednnMatmul::make(int64_t m, int64_t k, int64_t n, const uint16_t* a,
                                                 const uint16_t* b, float* c) {
  const Api& f = api();
  if (!f.ok) return nullptr;
  std::unique_ptr<OnednnMatmul> out(new OnednnMatmul);
  out->s_ = std::make_unique<State>();
  State& s = *out->s_;
  dnnl_memory_desc_t md[3];
  const dnnl_dims_t da = {m, k}, db = {k, n}, dc = {m, n};
  dnnl_matmul_desc_t desc;
  if (f.engine_create(&s.engine, dnnl_cpu, 0) != dnnl_success ||
      f.stream_create(&s.stream, s.engine, dnnl_stream_default_flags) != dnnl_success ||
      f.md_init(&md[0], 2, da, dnnl_bf16, dnnl_ab) != dnnl_success ||
      f.md_init(&md[1], 2, db, dnnl_bf16, dnnl_ab) != dnnl_success ||
      f.md_init(&md[2], 2, dc, dnnl_f32, dnnl_ab) != dnnl_success ||
      f.matmul_init(&desc, &md[0], &md[1], nullptr, &md[2]) != dnnl_success ||
      f.pd_create(&s.pd, &desc, nullptr, s.engine, nullptr) != dnnl_success ||
      f.prim_create(&s.prim, s.pd) != dnnl_success ||
      f.mem_create(&s.mem[0], &md[0], s.engine, const_cast<uint16_t*>(a)) != dnnl_success ||
      f.mem_create(&s.mem[1], &md[1], s.engine, const_cast<uint16_t*>(b)) != dnnl_success ||
      f.mem_create(&s.mem[2], &md[2], s.engine, c) != dnnl_success) {
    return nullptr;
  }
  const char* impl = nullptr;
  if (f.pd_query(s.pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl != nullptr) out->impl_ = impl;
  return out;
}

OnednnMatmul::~OnednnMatmul() {
  const Api& f = api();
  if (!s_ || !f.ok) return;
  for (dnnl_memory_t m : s_->mem)
    if (m) f.mem_destroy(m);
  if (s_->prim) f.prim_destroy(s_->prim);
  if (s_->pd) f.pd_destroy(s_->pd);
  if (s_->stream) f.stream_destroy(s_->stream);
  if (s_->engine) f.engine_destroy(s_->engine);
}

void OnednnMatmul::run() {
  const Api& f = api();
  const dnnl_exec_arg_t args[3] = {
      {DNNL_ARG_SRC, s_->mem[0]}, {DNNL_ARG_WEIGHTS, s_->mem[1]}, {DNNL_ARG_DST, s_->mem[2]}};
  f.execute(s_->prim, s_->stream, 3, args);
  f.stream_wait(s_->stream);
}

#else  // no oneDNN header at build time

struct OnednnMatmul::State {};
std::unique_ptr<OnednnMatmul> OnednnMatmul::make(int64_t, int64_t, int64_t, const uint16_t*, const uint16_t*, float*) {
  return nullptr;
}
OnednnMatmul::~OnednnMatmul() = default;
void OnednnMatmul::run() {}

#endif

}  // namespace kiln::bench
