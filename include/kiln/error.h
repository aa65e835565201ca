#pragma once
// kiln::Error: every misuse of the API (bad shapes, dtypes, axes, indices,
// memory limit, a failed evaluation) is reported with this exception. The
// message names the op, the shapes and the dtypes involved.
#include <stdexcept>
#include <string>

namespace kiln {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace kiln
