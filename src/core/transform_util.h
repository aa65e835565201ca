#pragma once
// Helpers shared by the transformation rules (src/core/rules_*.cpp) and
// the transformations themselves.
#include <optional>
#include <vector>

#include "kiln/array.h"

namespace kiln::detail {

// While alive, ops called on this thread without a stream run on `s`: the
// rules of a primitive build their graph on the primitive's stream.
class RuleStreamScope {
 public:
  explicit RuleStreamScope(Stream s);
  ~RuleStreamScope();
  RuleStreamScope(const RuleStreamScope&) = delete;
  RuleStreamScope& operator=(const RuleStreamScope&) = delete;
};
// The stream set by the innermost RuleStreamScope of this thread, if any.
std::optional<Stream> rule_stream();

// Moves axis `from` of a to position `to` (both non-negative).
array move_axis(const array& a, int from, int to);
// a with its batch axis (or none: -1) first; an unbatched a gets a new
// leading axis broadcast to size n when n >= 0, else a leading axis of 1.
array batch_first(const array& a, int axis, int n = -1);
// The size of the mapped axis shared by the batched inputs (-1 if none).
int batch_size(const std::vector<array>& inputs, const std::vector<int>& axes);

}  // namespace kiln::detail
