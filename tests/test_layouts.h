#pragma once
// Input layouts shared by the op tests: the same logical array laid out
// contiguously, transposed, strided, flipped (negative strides) or
// broadcast (zero strides).
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::test {

inline std::string fmt(const std::vector<int>& v) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
  os << ")";
  return os.str();
}

enum class Layout { kContiguous, kTransposed, kStrided, kFlipped, kBroadcast };
inline constexpr Layout kLayouts[] = {Layout::kContiguous, Layout::kTransposed, Layout::kStrided, Layout::kFlipped,
                               Layout::kBroadcast};

inline const char* layout_name(Layout l) {
  switch (l) {
    case Layout::kContiguous: return "contiguous";
    case Layout::kTransposed: return "transposed";
    case Layout::kStrided: return "strided";
    case Layout::kFlipped: return "flipped";
    case Layout::kBroadcast: return "broadcast";
  }
  return "?";
}

using Gen = std::function<array(const Shape&)>;

// An array of logical shape `shape` with the given memory layout; `gen` makes
// a row-major array of any shape.
inline array make_input(const Shape& shape, Layout layout, const Gen& gen) {
  const int nd = static_cast<int>(shape.size());
  if (nd == 0) return gen(shape);  // a 0-d array has one layout
  switch (layout) {
    case Layout::kContiguous:
      return gen(shape);
    case Layout::kTransposed:
      return transpose(gen(Shape(shape.rbegin(), shape.rend())));
    case Layout::kStrided: {  // every other element, starting at 1
      Shape base, start, stop, step;
      for (int d : shape) {
        base.push_back(2 * d + 1);
        start.push_back(1);
        stop.push_back(2 * d + 1);
        step.push_back(2);
      }
      return slice(gen(base), start, stop, step);
    }
    case Layout::kFlipped: {  // step -1 on every axis, -2 on the last
      Shape base = shape, start(nd, -1), stop, step(nd, -1);
      base.back() *= 2;
      step.back() = -2;
      for (int d : base) stop.push_back(-d - 1);
      return slice(gen(base), start, stop, step);
    }
    case Layout::kBroadcast: {  // every even axis comes from a size-1 axis
      Shape base = shape;
      for (int d = 0; d < nd; d += 2) base[d] = 1;
      return broadcast_to(gen(base), shape);
    }
  }
  return gen(shape);
}

}  // namespace kiln::test
