#include "core/ops_util.h"

#include "kiln/error.h"

namespace kiln {

std::string format_shape(const Shape& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + ")";
}

std::string describe(std::initializer_list<const array*> arrays) {
  std::string s;
  for (const array* a : arrays) {
    if (!s.empty()) s += ", ";
    s += format_shape(a->shape()) + " " + dtype_name(a->dtype());
  }
  return s;
}

std::string describe(const std::vector<array>& arrays) {
  std::string s;
  for (const auto& a : arrays) {
    if (!s.empty()) s += ", ";
    s += format_shape(a.shape()) + " " + dtype_name(a.dtype());
  }
  return s;
}

void fail(const char* op, const std::string& message, std::initializer_list<const array*> inputs) {
  std::string m = std::string("[") + op + "] " + message;
  if (inputs.size()) m += "; inputs: " + describe(inputs);
  throw Error(m);
}

void fail(const char* op, const std::string& message, const std::vector<array>& inputs) {
  std::string m = std::string("[") + op + "] " + message;
  if (!inputs.empty()) m += "; inputs: " + describe(inputs);
  throw Error(m);
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op, std::initializer_list<const array*> inputs) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da == db || db == 1) {
      out[i] = da;
    } else if (da == 1) {
      out[i] = db;
    } else {
      fail(op, "shapes " + format_shape(a) + " and " + format_shape(b) + " cannot be broadcast together", inputs);
    }
  }
  return out;
}

int normalize_axis(int axis, int ndim, const char* op, const array& a) {
  int ax = axis < 0 ? axis + ndim : axis;
  if (ax < 0 || ax >= ndim) {
    fail(op, "axis " + std::to_string(axis) + " is out of range for an array of " + std::to_string(ndim) +
                 " dimensions",
         {&a});
  }
  return ax;
}

std::vector<int> normalize_axes(const std::vector<int>& axes, int ndim, const char* op, const array& a) {
  std::vector<int> out;
  out.reserve(axes.size());
  for (int ax : axes) out.push_back(normalize_axis(ax, ndim, op, a));
  std::sort(out.begin(), out.end());
  for (size_t i = 1; i < out.size(); ++i) {
    if (out[i] == out[i - 1]) fail(op, "axis " + std::to_string(out[i]) + " is repeated", {&a});
  }
  return out;
}

int64_t shape_size(const Shape& shape) {
  int64_t n = 1;
  for (int d : shape) n *= d;
  return n;
}

}  // namespace kiln
