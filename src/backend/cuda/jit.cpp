// NVRTC builds, the cubin cache and library loading (jit.h).
//
// A cubin is written under the CPU JIT's cache directory as
// kiln-cuda-<hash>.cubin, through a unique temporary name renamed into
// place, so concurrent processes never load a half-written file. In a
// process one mutex serializes builds and a map keeps the loaded kernels
// (libraries live as long as the process). The CUDA include directory for
// NVRTC (cuda_fp16.h, cooperative_groups.h) is that of the toolkit that
// built Kiln, or $KILN_CUDA_INCLUDE_DIR.
#include "backend/cuda/jit.h"

#include <nvrtc.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "backend/cpu/compiled_codegen.h"
#include "backend/cuda/cuda_common.h"
#include "core/compiled.h"
#include "kiln/error.h"

namespace kiln::cuda {
namespace {

std::mutex jit_mutex;
std::unordered_map<std::string, cudaKernel_t> loaded;  // key + name -> kernel
std::atomic<int64_t> nvrtc_builds{0};
std::atomic<int64_t> disk_loads{0};

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

std::string include_dir() {
  const char* e = std::getenv("KILN_CUDA_INCLUDE_DIR");
  if (e && *e) return e;
  return KILN_CUDA_INCLUDE_DIR;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return "";
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

[[noreturn]] void nvrtc_fail(const char* op, const std::string& name, const char* what, nvrtcResult r) {
  throw Error(std::string("[") + op + "] NVRTC " + what + " failed for kernel " + name + ": " + nvrtcGetErrorString(r));
}

// The cubin (or, for a compute_XX target, the PTX) of `source`, or a
// kiln::Error with NVRTC's log.
std::string compile(const std::string& source, const std::string& name, const std::vector<std::string>& options,
                    const char* op, bool ptx = false) {
  nvrtcProgram prog;
  nvrtcResult r = nvrtcCreateProgram(&prog, source.c_str(), (name + ".cu").c_str(), 0, nullptr, nullptr);
  if (r != NVRTC_SUCCESS) nvrtc_fail(op, name, "nvrtcCreateProgram", r);
  std::vector<const char*> opts;
  for (const auto& o : options) opts.push_back(o.c_str());
  r = nvrtcCompileProgram(prog, static_cast<int>(opts.size()), opts.data());
  if (r != NVRTC_SUCCESS) {
    size_t n = 0;
    nvrtcGetProgramLogSize(prog, &n);
    std::string log(n, '\0');
    if (n) nvrtcGetProgramLog(prog, log.data());
    nvrtcDestroyProgram(&prog);
    throw Error(std::string("[") + op + "] kernel " + name + " could not be built: NVRTC failed (" +
                nvrtcGetErrorString(r) + "):\n" + log.c_str());
  }
  size_t n = 0;
  r = ptx ? nvrtcGetPTXSize(prog, &n) : nvrtcGetCUBINSize(prog, &n);
  std::string code(n, '\0');
  if (r == NVRTC_SUCCESS) r = ptx ? nvrtcGetPTX(prog, code.data()) : nvrtcGetCUBIN(prog, code.data());
  nvrtcDestroyProgram(&prog);
  if (r != NVRTC_SUCCESS) nvrtc_fail(op, name, ptx ? "nvrtcGetPTX" : "nvrtcGetCUBIN", r);
  return code;
}

// Writes the cubin into the disk cache; a failure only costs a rebuild later.
void store(const std::string& path, const std::string& cubin) {
  static std::atomic<int> serial{0};
  std::string tmp = path + "." + std::to_string(::getpid()) + "." + std::to_string(serial++) + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    f.write(cubin.data(), static_cast<std::streamsize>(cubin.size()));
    if (!f) return;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

// NVRTC's defaults otherwise (--fmad=true, IEEE division and square root),
// which are nvcc's: compile's fused kernels round as the library's do.
std::vector<std::string> nvrtc_options(int arch, bool ptx = false) {
  const std::string inc = include_dir();
  const std::string target = std::string(ptx ? "compute_" : "sm_") + std::to_string(arch);
  std::vector<std::string> options = {"--gpu-architecture=" + target, "-std=c++17",
                                      "--device-as-default-execution-space", "-I" + inc};
  // CUDA 13 keeps libcu++ (cooperative_groups.h, cuda/std/) under cccl/.
  std::error_code ec;
  if (std::filesystem::is_directory(inc + "/cccl", ec)) options.push_back("-I" + inc + "/cccl");
  return options;
}

}  // namespace

std::string jit_compile(const std::string& source, const std::string& name, int arch, const char* op) {
  return compile(source, name, nvrtc_options(arch), op);
}

std::string jit_ptx(const std::string& source, const std::string& name, int arch, const char* op) {
  return compile(source, name, nvrtc_options(arch, true), op, true);
}

cudaKernel_t jit_kernel(const std::string& source, const std::string& name, const char* op) {
  int device = 0, major = 0, minor = 0;
  KILN_CUDA_CHECK(op, cudaGetDevice(&device));
  KILN_CUDA_CHECK(op, cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  KILN_CUDA_CHECK(op, cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  int nv_major = 0, nv_minor = 0;
  nvrtcVersion(&nv_major, &nv_minor);
  const std::vector<std::string> options = nvrtc_options(major * 10 + minor);
  std::error_code ec;
  std::string line = "nvrtc " + std::to_string(nv_major) + "." + std::to_string(nv_minor);
  for (const auto& o : options) line += " " + o;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a(source + "\n" + line)));
  const std::string key = std::string(hex) + ":" + name;

  std::lock_guard lock(jit_mutex);
  auto it = loaded.find(key);
  if (it != loaded.end()) return it->second;

  std::string dir = cpu::codegen::jit_cache_dir();
  bool disk = !dir.empty() && (std::filesystem::create_directories(dir, ec), !ec);
  std::string path = disk ? dir + "/kiln-cuda-" + hex + ".cubin" : "";
  std::string cubin = disk ? read_file(path) : "";
  if (cubin.empty()) {
    cubin = compile(source, name, options, op);
    nvrtc_builds.fetch_add(1);
    if (disk) store(path, cubin);
  } else {
    disk_loads.fetch_add(1);
  }
  cudaLibrary_t lib;
  KILN_CUDA_CHECK(op, cudaLibraryLoadData(&lib, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  cudaKernel_t kernel;
  KILN_CUDA_CHECK(op, cudaLibraryGetKernel(&kernel, lib, name.c_str()));
  loaded[key] = kernel;
  return kernel;
}

}  // namespace kiln::cuda

namespace kiln::detail {
GpuJitCounters gpu_jit_counters() { return {cuda::nvrtc_builds.load(), cuda::disk_loads.load()}; }
}  // namespace kiln::detail
