#pragma once
// The oracle tests' way to run a Python script (against MLX from PyPI):
// the script goes to dir/run.py and runs as `python3 dir/run.py dir`.
#include <cstdlib>
#include <fstream>
#include <string>

namespace kiln::test {

// Returns the script's exit status.
inline int run_python_in(const std::string& dir, const std::string& script) {
  const std::string path = dir + "/run.py";
  std::ofstream(path) << script;
  return std::system(("python3 " + path + " " + dir).c_str());
}

}  // namespace kiln::test
