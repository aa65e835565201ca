#include <omp.h>

#include <atomic>
#include <cstdlib>
#include <thread>

#include "kiln/device.h"
#include "kiln/error.h"

namespace kiln {
namespace {
int initial_threads() {
  if (const char* env = std::getenv("KILN_NUM_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
  }
  int n = omp_get_num_procs();
  return n > 0 ? n : 1;
}
std::atomic<int>& thread_setting() {
  static std::atomic<int> n{initial_threads()};
  return n;
}
}  // namespace

int cpu_threads() { return thread_setting().load(std::memory_order_relaxed); }
void set_cpu_threads(int n) {
  if (n < 1) throw Error("[set_cpu_threads] thread count must be at least 1, got " + std::to_string(n));
  thread_setting().store(n);
}

}  // namespace kiln
