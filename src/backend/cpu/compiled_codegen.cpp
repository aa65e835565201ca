// Building, caching and running generated fused kernels (compiled_codegen.h).
//
// A kernel's source (codegen_emit.cpp) is compiled by the host compiler
// ($KILN_CXX, else the compiler that built Kiln, else `c++`) into a shared
// object named by a hash of the source and the command line, in the cache
// directory ($KILN_CACHE_DIR, $XDG_CACHE_HOME/kiln or ~/.cache/kiln). The
// object is written under a unique temporary name and renamed into place,
// so concurrent processes never load a half-written file; within a process
// one mutex serializes builds and a map keeps what is loaded. A kernel that
// cannot be built (no compiler, a compiler error, an unwritable directory)
// is remembered as missing and the interpreter runs the region; the reason
// is printed once to stderr when KILN_VERBOSE is set.
#include "backend/cpu/compiled_codegen.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <unordered_map>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/elementwise.h"
#include "backend/cpu/threading.h"
#include "core/array_desc.h"

extern char** environ;

namespace kiln {
namespace {

std::atomic<int> backend_override{-1};
std::atomic<int64_t> compiler_runs{0};
std::atomic<int64_t> disk_loads{0};
std::atomic<int64_t> failures{0};

// A kernel built (or not) in this process: its address, else why not.
struct Loaded {
  void* fn = nullptr;
  std::string why;
  bool fresh = false;  // this call tried to build or load it
};
std::mutex build_mutex;                                   // one build at a time in a process
std::unordered_map<std::string, Loaded> loaded_kernels;  // full key -> kernel

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

void log_once(const std::string& msg) {
  static std::once_flag once;
  if (!env("KILN_VERBOSE")) return;
  std::call_once(once, [&] { std::fprintf(stderr, "kiln: compile: %s; the interpreter runs such regions\n", msg.c_str()); });
}

std::string cache_dir() {
  if (const char* d = env("KILN_CACHE_DIR")) return d;
  if (const char* d = env("XDG_CACHE_HOME")) return std::string(d) + "/kiln";
  if (const char* d = env("HOME")) return std::string(d) + "/.cache/kiln";
  return "";
}

std::string compiler() {
  if (const char* c = env("KILN_CXX")) return c;
#ifdef KILN_DEFAULT_CXX
  if (::access(KILN_DEFAULT_CXX, X_OK) == 0) return KILN_DEFAULT_CXX;
#endif
  return "c++";
}

// The instruction set follows cpu_target() like the library's own kernels
// (KILN_CPU_TARGET lowers it); -ffp-contract=off: see kernel_math.inc.
std::vector<std::string> compiler_flags() {
  std::vector<std::string> f = {"-std=c++20", "-O3", "-ffp-contract=off", "-fPIC", "-shared", "-fno-exceptions"};
  cpu::CpuTarget t = cpu::cpu_target();
  if (t >= cpu::CpuTarget::avx512) {
    f.insert(f.end(), {"-march=x86-64-v4", "-mprefer-vector-width=512"});
    if (t >= cpu::CpuTarget::avx512_bf16) f.push_back("-mavx512bf16");  // vcvtneps2bf16 (codegen_emit.cpp)
  } else if (t >= cpu::CpuTarget::avx2) {
    f.push_back("-march=x86-64-v3");
  } else {
    f.push_back("-march=x86-64");
  }
  return f;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

std::string hex(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// Runs argv with stdout and stderr into log_path; true on exit status 0.
bool run_compiler(const std::vector<std::string>& args, const std::string& log_path, std::string* why) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = 0;
  compiler_runs.fetch_add(1);
  int rc = posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    *why = "cannot start the compiler " + args[0];
    return false;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      *why = "lost the compiler process";
      return false;
    }
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::ifstream log(log_path);
    std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    *why = "the compiler " + args[0] + " failed (log: " + log_path + "):\n" + text;
    return false;
  }
  return true;
}

void* load_kernel(const std::string& path, const char* symbol, std::string* why) {
  void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = ::dlerror();
    *why = std::string("dlopen failed: ") + (e ? e : path);
    return nullptr;
  }
  void* fn = ::dlsym(h, symbol);
  if (!fn) *why = "no kernel symbol in " + path;
  return fn;  // the handle stays open: kernels live as long as the process
}

// `symbol` of `source`, from memory, the disk cache, or a fresh build.
Loaded build(const std::string& source, const char* symbol) {
  std::string cxx = compiler();
  std::vector<std::string> flags = compiler_flags();
  std::string line = cxx;
  for (const auto& f : flags) line += " " + f;
  std::string key = hex(fnv1a(source + "\n" + line));
  std::lock_guard lock(build_mutex);
  auto it = loaded_kernels.find(key);
  if (it != loaded_kernels.end()) return it->second;

  void* fn = nullptr;
  std::string why;
  std::string dir = cache_dir();
  std::error_code ec;
  if (dir.empty() || (std::filesystem::create_directories(dir, ec), ec)) {
    why = "no usable cache directory (" + dir + ")";
  } else {
    std::string final_so = dir + "/kiln-" + key + ".so";
    if (::access(final_so.c_str(), R_OK) == 0) {
      fn = load_kernel(final_so, symbol, &why);
      if (fn) disk_loads.fetch_add(1);
    }
    if (!fn) {
      // Unique names per process and build; rename is atomic.
      static std::atomic<int> serial{0};
      std::string tmp = dir + "/.kiln-" + key + "." + std::to_string(::getpid()) + "." + std::to_string(serial++);
      std::string src_path = tmp + ".cpp", so_path = tmp + ".so", log_path = dir + "/kiln-" + key + ".log";
      std::ofstream(src_path) << source;
      std::vector<std::string> args = {cxx};
      args.insert(args.end(), flags.begin(), flags.end());
      args.insert(args.end(), {"-o", so_path, src_path});
      if (run_compiler(args, log_path, &why)) {
        std::filesystem::rename(so_path, final_so, ec);
        if (ec) {
          why = "cannot move the kernel into " + final_so;
        } else {
          fn = load_kernel(final_so, symbol, &why);
          std::filesystem::remove(log_path, ec);
        }
      }
      std::filesystem::remove(src_path, ec);
      std::filesystem::remove(so_path, ec);
    }
  }
  loaded_kernels[key] = Loaded{fn, fn ? "" : why, false};
  return Loaded{fn, fn ? "" : why, true};
}

// A fused kernel, or null (counted and logged) when it cannot be built.
void* kernel_for(const std::string& source) {
  Loaded k = build(source, cpu::codegen::kKernelSymbol);
  if (!k.fn && k.fresh) {
    failures.fetch_add(1);
    log_once(k.why);
  }
  return k.fn;
}

// How each input is read (compiled_codegen.h) with the output as rows of
// `inner` elements; empty when no split of the output's dims covers every
// input (a transposed or strided input: the interpreter gathers those).
std::string plan_layouts(const std::vector<array>& inputs, const Shape& shape, int64_t* inner) {
  const int nd = static_cast<int>(shape.size());
  std::vector<Strides> bstrides;
  for (const auto& in : inputs) {
    const auto& d = *in.desc();
    int ni = static_cast<int>(d.shape.size());
    Strides st(nd, 0);
    for (int i = 0; i < ni; ++i) {
      int o = nd - ni + i;
      st[o] = d.shape[i] == 1 && shape[o] != 1 ? 0 : d.strides[i];
    }
    bstrides.push_back(st);
  }
  auto zero = [](const Strides& st, int b, int e) {
    for (int i = b; i < e; ++i) {
      if (st[i] != 0) return false;
    }
    return true;
  };
  auto contiguous = [&](const Strides& st, int b, int e) {
    return detail::is_row_contiguous(Shape(shape.begin() + b, shape.begin() + e), Strides(st.begin() + b, st.begin() + e));
  };
  // Split 0 is "one row"; then every split of the dims, innermost first.
  for (int s = 0; s < std::max(nd, 1); ++s) {
    std::string layouts;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Strides& st = bstrides[i];
      if (inputs[i].size() == 1) {
        layouts += 's';
      } else if (contiguous(st, 0, nd)) {
        layouts += 'c';
      } else if (s > 0 && zero(st, 0, s) && contiguous(st, s, nd)) {
        layouts += 'r';
      } else if (s > 0 && zero(st, s, nd) && contiguous(st, 0, s)) {
        layouts += 'k';
      } else {
        break;
      }
    }
    if (layouts.size() != inputs.size()) continue;
    int64_t in = 1;
    for (int d = s > 0 ? s : 0; d < nd; ++d) in *= shape[d];
    *inner = std::max<int64_t>(in, 1);
    return layouts;
  }
  return "";
}

}  // namespace

namespace detail {

CompileBackend compile_backend() {
  int o = backend_override.load();
  if (o >= 0) return static_cast<CompileBackend>(o);
  static const CompileBackend from_env = [] {
    const char* v = env("KILN_COMPILE_BACKEND");
    std::string s = v ? v : "auto";
    if (s == "interp") return CompileBackend::interp;
    if (s == "codegen") return CompileBackend::codegen;
    return CompileBackend::automatic;
  }();
  return from_env;
}
void set_compile_backend(CompileBackend b) { backend_override = static_cast<int>(b); }
void clear_compile_backend() { backend_override = -1; }

CodegenCounters codegen_counters() { return {compiler_runs.load(), disk_loads.load(), failures.load()}; }

void clear_codegen_memory_cache() {
  std::lock_guard lock(build_mutex);
  loaded_kernels.clear();
}

}  // namespace detail

namespace cpu::codegen {

std::string jit_cache_dir() { return cache_dir(); }

void* jit_symbol(const std::string& source, const char* symbol, std::string* why) {
  Loaded k = build(source, symbol);
  if (!k.fn) *why = k.why;
  return k.fn;
}

bool run(Compiled& c, const std::vector<array>& inputs, array& out) {
  int64_t inner = 1;
  std::string layouts = plan_layouts(inputs, out.shape(), &inner);
  if (layouts.empty()) return false;
  auto fn = reinterpret_cast<KernelFn>(c.codegen_kernel(layouts, [&]() -> void* {
    std::string src = kernel_source(c, layouts);
    return src.empty() ? nullptr : kernel_for(src);
  }));
  if (!fn) return false;
  std::vector<const void*> ptrs;
  for (const auto& in : inputs) ptrs.push_back(detail::data_ptr(in));
  void* o = detail::data_ptr(out);
  parallel_for(static_cast<int64_t>(out.size()), kElementwiseGrain,
               [&](int64_t b, int64_t e) { fn(ptrs.data(), o, b, e, inner); });
  return true;
}

}  // namespace cpu::codegen
}  // namespace kiln
