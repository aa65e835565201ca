#pragma once
// Helpers shared by the transformation rules (src/core/rules_*.cpp) and
// the transformations themselves.
#include <optional>
#include <unordered_set>
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
// The nodes between `sources` and `outputs`, each after its inputs; only
// nodes that depend on a source are listed (a multi-output node once).
// `depends` receives the desc of every array, sources included, that
// depends on a source. With through_stop_gradient false, stop_gradient
// nodes are leaves (differentiation); vmap maps through them.
std::vector<array> dependent_tape(const std::vector<array>& sources, const std::vector<array>& outputs,
                                  bool through_stop_gradient, std::unordered_set<const ArrayDesc*>& depends);

// The size of the mapped axis shared by the batched inputs (-1 if none).
int batch_size(const std::vector<array>& inputs, const std::vector<int>& axes);

}  // namespace kiln::detail
