#pragma once
// What the oracle tests against Python packages (MLX from PyPI) share: a
// check that python3 can run a snippet, a scratch directory per test, and
// a script run as `python3 dir/run.py dir`.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace kiln::test {

// Whether `python3 -c 'code'` succeeds (e.g. "import mlx.core").
inline bool python_runs(const std::string& code) {
  return std::system(("python3 -c '" + code + "' > /dev/null 2>&1").c_str()) == 0;
}

// A directory under the system's temporary directory for one test's files
// (the process id keeps concurrent test processes apart).
inline std::filesystem::path scratch_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("kiln_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

// Writes `script` to dir/run.py and runs it with dir as its argument;
// returns the exit status.
inline int run_python_in(const std::string& dir, const std::string& script) {
  const std::string path = dir + "/run.py";
  std::ofstream(path) << script;
  return std::system(("python3 " + path + " " + dir).c_str());
}

}  // namespace kiln::test
