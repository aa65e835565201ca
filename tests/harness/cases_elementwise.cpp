// Harness cases of the elementwise ops: Unary, Binary, Select, Copy.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <sstream>

#include "harness/harness.h"

namespace kiln::harness {
namespace {

using UFn = array (*)(const array&, StreamOrDevice);
using BFn = array (*)(const array&, const array&, StreamOrDevice);

// The inverse of erf by Newton's method (double).
double erfinv_ref(double y) {
  double x = 0.0;
  for (int i = 0; i < 100; ++i) {
    double f = std::erf(x) - y;
    if (std::fabs(f) < 1e-16) break;
    x -= f / (2.0 / std::sqrt(std::numbers::pi) * std::exp(-x * x));
  }
  return x;
}

double sigmoid_ref(double x) { return 1.0 / (1.0 + std::exp(-x)); }

struct UnarySpec {
  const char* name;
  UFn fn;
  double (*ref)(double);
  double lo, hi;
  bool smooth;     // differentiable (and twice)
  bool integers;   // also run on int32
};

const UnarySpec kUnary[] = {
    {"abs", abs, [](double x) { return std::fabs(x); }, -2, 2, true, true},
    {"negative", negative, [](double x) { return -x; }, -2, 2, true, true},
    {"sign", sign, [](double x) { return double((x > 0) - (x < 0)); }, -2, 2, true, true},
    {"exp", exp, [](double x) { return std::exp(x); }, -2, 2, true, false},
    {"expm1", expm1, [](double x) { return std::expm1(x); }, -2, 2, true, false},
    {"log", log, [](double x) { return std::log(x); }, 0.1, 3, true, false},
    {"log1p", log1p, [](double x) { return std::log1p(x); }, -0.9, 2, true, false},
    {"sqrt", sqrt, [](double x) { return std::sqrt(x); }, 0.1, 3, true, false},
    {"rsqrt", rsqrt, [](double x) { return 1.0 / std::sqrt(x); }, 0.1, 3, true, false},
    {"square", square, [](double x) { return x * x; }, -2, 2, true, true},
    {"sin", sin, [](double x) { return std::sin(x); }, -3, 3, true, false},
    {"cos", cos, [](double x) { return std::cos(x); }, -3, 3, true, false},
    {"tanh", tanh, [](double x) { return std::tanh(x); }, -2, 2, true, false},
    {"sigmoid", sigmoid, sigmoid_ref, -3, 3, true, false},
    {"erf", erf, [](double x) { return std::erf(x); }, -2, 2, true, false},
    {"erfinv", erfinv, erfinv_ref, -0.9, 0.9, true, false},
    {"floor", floor, [](double x) { return std::floor(x); }, -3, 3, true, true},
    {"ceil", ceil, [](double x) { return std::ceil(x); }, -3, 3, true, true},
    {"round", round, [](double x) { return std::nearbyint(x); }, -3, 3, true, true},
    {"relu", relu, [](double x) { return x > 0 ? x : 0.0; }, -2, 2, true, true},
    {"gelu", gelu, [](double x) { return 0.5 * x * (1 + std::erf(x / std::numbers::sqrt2)); }, -3, 3, true, false},
    {"gelu_approx", gelu_approx,
     [](double x) {
       return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
     },
     -3, 3, true, false},
    {"silu", silu, [](double x) { return x * sigmoid_ref(x); }, -3, 3, true, false},
    {"logical_not", logical_not, [](double x) { return x == 0 ? 1.0 : 0.0; }, 0, 1, false, false},
    {"tan", tan, [](double x) { return std::tan(x); }, -1.2, 1.2, true, false},
    {"arcsin", arcsin, [](double x) { return std::asin(x); }, -0.9, 0.9, true, false},
    {"arccos", arccos, [](double x) { return std::acos(x); }, -0.9, 0.9, true, false},
    {"arctan", arctan, [](double x) { return std::atan(x); }, -2, 2, true, false},
    {"sinh", sinh, [](double x) { return std::sinh(x); }, -2, 2, true, false},
    {"cosh", cosh, [](double x) { return std::cosh(x); }, -2, 2, true, false},
    {"arcsinh", arcsinh, [](double x) { return std::asinh(x); }, -2, 2, true, false},
    {"arccosh", arccosh, [](double x) { return std::acosh(x); }, 1.2, 3, true, false},
    {"arctanh", arctanh, [](double x) { return std::atanh(x); }, -0.9, 0.9, true, false},
    {"log2", log2, [](double x) { return std::log2(x); }, 0.1, 3, true, false},
    {"log10", log10, [](double x) { return std::log10(x); }, 0.1, 3, true, false},
};

const std::vector<Dtype> kInts = {int32, int64, uint8, int16, uint16};
double as_int(double x) { return static_cast<double>(static_cast<int64_t>(x)); }

// 0-d, odd, 3-d, empty, and one large enough for the vector and threaded paths.
const Shape kShapes[] = {{}, {7}, {3, 5}, {2, 3, 4}, {0, 3}, {33, 67}};

struct BinarySpec {
  const char* name;
  BFn fn;
  double (*ref)(double, double);
  double alo, ahi, blo, bhi;
  bool diff;
  std::vector<Dtype> dtypes;
};

const std::vector<Dtype> kFloats = {float32, float16, bfloat16, float64};
const std::vector<Dtype> kFloatsInt = {float32, float16, bfloat16, float64, int32, int16};
// Every integer type, for the ops that cannot overflow.
const std::vector<Dtype> kEvery = {float32, float16, bfloat16, float64, int32, uint8, int8,
                                   uint32,  int64,   uint16,   int16,   uint64};

double py_mod(double a, double b) {
  double r = std::fmod(a, b);
  return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
}

const BinarySpec kBinary[] = {
    {"add", kiln::add, [](double a, double b) { return a + b; }, -2, 2, -2, 2, true, kFloatsInt},
    {"subtract", subtract, [](double a, double b) { return a - b; }, -2, 2, -2, 2, true, kFloatsInt},
    {"multiply", multiply, [](double a, double b) { return a * b; }, -2, 2, -2, 2, true, kFloatsInt},
    {"divide", divide, [](double a, double b) { return a / b; }, -2, 2, 0.5, 2, true, kFloats},
    {"power", power, [](double a, double b) { return std::pow(a, b); }, 0.5, 2, -2, 2, true, kFloats},
    {"maximum", maximum, [](double a, double b) { return std::max(a, b); }, -2, 2, -2, 2, true, kEvery},
    {"minimum", minimum, [](double a, double b) { return std::min(a, b); }, -2, 2, -2, 2, true, kEvery},
    {"remainder", remainder, py_mod, -5, 5, 0.7, 2, true, kFloats},
    {"remainder", remainder, py_mod, -9, 9, -4, -1, false, {int32}},
    {"remainder", remainder, py_mod, -5, 5, -2, -0.7, true, {float32}},
    {"equal", equal, [](double a, double b) { return double(a == b); }, -2, 2, -2, 2, false, kEvery},
    {"not_equal", not_equal, [](double a, double b) { return double(a != b); }, -2, 2, -2, 2, false, kEvery},
    {"less", less, [](double a, double b) { return double(a < b); }, -2, 2, -2, 2, false, kEvery},
    {"less_equal", less_equal, [](double a, double b) { return double(a <= b); }, -2, 2, -2, 2, false, kEvery},
    {"greater", greater, [](double a, double b) { return double(a > b); }, -2, 2, -2, 2, false, kEvery},
    {"greater_equal", greater_equal, [](double a, double b) { return double(a >= b); }, -2, 2, -2, 2, false,
     kEvery},
    {"logical_and", logical_and, [](double a, double b) { return double(a != 0 && b != 0); }, 0, 1, 0, 1, false,
     {bool_}},
    {"logical_or", logical_or, [](double a, double b) { return double(a != 0 || b != 0); }, 0, 1, 0, 1, false,
     {bool_}},
    {"arctan2", arctan2, [](double a, double b) { return std::atan2(a, b); }, -2, 2, 0.3, 2, true, kFloats},
    {"floor_divide", floor_divide, [](double a, double b) { return std::floor(a / b); }, -5, 5, 0.7, 2, false,
     kFloats},
    {"floor_divide", floor_divide, [](double a, double b) { return std::floor(a / b); }, 0, 50, 1, 6, false,
     {int32, int64}},
    {"bitwise_and", bitwise_and,
     [](double a, double b) { return double(static_cast<int64_t>(a) & static_cast<int64_t>(b)); }, 0, 100, 0, 100,
     false, kInts},
    {"bitwise_or", bitwise_or,
     [](double a, double b) { return double(static_cast<int64_t>(a) | static_cast<int64_t>(b)); }, 0, 100, 0, 100,
     false, kInts},
    {"bitwise_xor", bitwise_xor,
     [](double a, double b) { return double(static_cast<int64_t>(a) ^ static_cast<int64_t>(b)); }, 0, 100, 0, 100,
     false, kInts},
    {"left_shift", left_shift,
     [](double a, double b) { return double(static_cast<int64_t>(a) << static_cast<int64_t>(b)); }, 0, 16, 0, 3,
     false, kInts},
    {"right_shift", right_shift,
     [](double a, double b) { return double(static_cast<int64_t>(a) >> static_cast<int64_t>(b)); }, 0, 100, 0, 7,
     false, kInts},
};

// Pairs of shapes: equal, broadcast both ways, scalar with vector, empty.
const std::pair<Shape, Shape> kPairs[] = {
    {{3, 5}, {3, 5}}, {{2, 3, 4}, {3, 1}}, {{4, 1}, {1, 5}}, {{}, {7}}, {{0, 3}, {3}}, {{33, 67}, {67}}};

}  // namespace

void register_elementwise() {
  for (const auto& u : kUnary) {
    for (const auto& shape : kShapes) {
      Case c;
      c.op = u.name;
      c.primitive = std::string("Unary:") + u.name;
      c.name = test::fmt(shape);
      UFn f = u.fn;
      c.fn = [f](const Arrays& x) { return Arrays{f(x[0], {})}; };
      c.inputs = {in(shape, u.lo, u.hi)};
      c.ref = ref_unary(u.ref);
      if (std::string(u.name) == "logical_not") {
        c.dtypes = {bool_, float32};
      } else if (u.integers) {
        c.dtypes = kFloatsInt;
      }
      c.diff = {0};
      c.grad2 = u.smooth;
      add(std::move(c));
    }
  }

  for (const auto& b : kBinary) {
    for (const auto& [sa, sb] : kPairs) {
      Case c;
      c.op = b.name;
      c.primitive = std::string("Binary:") + b.name;
      std::ostringstream name;
      name << test::fmt(sa) << "x" << test::fmt(sb) << " b in [" << b.blo << "," << b.bhi << ")";
      c.name = name.str();
      BFn f = b.fn;
      c.fn = [f](const Arrays& x) { return Arrays{f(x[0], x[1], {})}; };
      c.inputs = {in(sa, b.alo, b.ahi), in(sb, b.blo, b.bhi)};
      c.ref = ref_binary(b.ref);
      c.dtypes = b.dtypes;
      // Comparisons and logical ops are differentiated too: their cotangents
      // must be zeros of the inputs' shapes.
      bool has_float = std::any_of(c.dtypes.begin(), c.dtypes.end(), [](Dtype t) { return is_floating_point(t); });
      if (has_float) c.diff = {0, 1};
      c.grad2 = b.diff;
      add(std::move(c));
    }
  }

  for (const auto& shape : kShapes) {
    add({.op = "bitwise_invert",
         .primitive = "Unary:bitwise_invert",
         .name = test::fmt(shape),
         .fn = [](const Arrays& x) { return Arrays{bitwise_invert(x[0])}; },
         .inputs = {in(shape, -50, 50)},
         .dtypes = {int32, int64},
         .ref = ref_unary([](double x) { return -as_int(x) - 1; })});
  }

  // One input as both operands.
  add({.op = "power",
       .primitive = "Binary:power",
       .name = "x ** x",
       .fn = [](const Arrays& x) { return Arrays{power(x[0], x[0])}; },
       .inputs = {in({3, 5}, 0.5, 2)},
       .ref = ref_unary([](double v) { return std::pow(v, v); }),
       .diff = {0},
       .grad2 = true});
  add({.op = "maximum",
       .primitive = "Binary:maximum",
       .name = "maximum(x, x) (ties everywhere)",
       .fn = [](const Arrays& x) { return Arrays{maximum(x[0], x[0])}; },
       .inputs = {in({7})},
       .ref = ref_unary([](double v) { return v; }),
       .diff = {0},
       .grad2 = true});

  // where(condition, x, y): three-way broadcast, a bool condition.
  auto where_ref = [](const Arrays& x) {
    Shape out = broadcast_shape(broadcast_shape(x[0].shape(), x[1].shape()), x[2].shape());
    auto c = broadcast_values(x[0], out), a = broadcast_values(x[1], out), b = broadcast_values(x[2], out);
    for (size_t i = 0; i < c.size(); ++i) c[i] = c[i] != 0 ? a[i] : b[i];
    return std::vector<std::vector<double>>{c};
  };
  for (const auto& shapes : std::vector<std::vector<Shape>>{{{3, 5}, {3, 5}, {3, 5}},
                                                             {{3, 1}, {3, 4}, {4}},
                                                             {{2, 3, 4}, {}, {3, 4}},
                                                             {{0, 2}, {2}, {1}}}) {
    add({.op = "where",
         .primitive = "Select",
         .name = test::fmt(shapes[0]) + test::fmt(shapes[1]) + test::fmt(shapes[2]),
         .fn = [](const Arrays& x) { return Arrays{where(x[0], x[1], x[2])}; },
         .inputs = {fixed(shapes[0], bool_, 0, 1), in(shapes[1]), in(shapes[2])},
         .dtypes = kFloatsInt,
         .ref = where_ref,
         .diff = {1, 2},
         .grad2 = true});
  }

  // clip: maximum then minimum, either bound optional.
  add({.op = "clip",
       .primitive = "Binary:minimum",
       .name = "(3,5) [lo (5), hi ()]",
       .fn = [](const Arrays& x) { return Arrays{clip(x[0], x[1], x[2])}; },
       .inputs = {in({3, 5}), in({5}, -1.5, 0), in({}, 0.2, 1.5)},
       .dtypes = kFloatsInt,
       .ref = [](const Arrays& x) {
         auto a = values(x[0]), lo = broadcast_values(x[1], x[0].shape()), hi = broadcast_values(x[2], x[0].shape());
         for (size_t i = 0; i < a.size(); ++i) a[i] = std::min(std::max(a[i], lo[i]), hi[i]);
         return std::vector<std::vector<double>>{a};
       },
       .diff = {0, 1, 2}});
  add({.op = "clip",
       .primitive = "Binary:maximum",
       .name = "(2,3,4) [lo only]",
       .fn = [](const Arrays& x) { return Arrays{clip(x[0], x[1], std::nullopt)}; },
       .inputs = {in({2, 3, 4}), in({3, 1}, -1, 0)},
       .ref = ref_binary([](double a, double lo) { return std::max(a, lo); }),
       .diff = {0, 1}});

  // astype / copy / contiguous: the Copy primitive, across dtypes and layouts.
  for (Dtype to : {float64, float32, int32, int16, bool_}) {
    for (const auto& shape : {Shape{3, 5}, Shape{2, 3, 4}, Shape{0, 4}}) {
      Case c{.op = "astype", .primitive = "Copy", .name = std::string("to ") + dtype_name(to) + " " + test::fmt(shape)};
      c.fn = [to](const Arrays& x) { return Arrays{astype(x[0], to)}; };
      c.inputs = {in(shape, -3, 3)};
      c.dtypes = to == float64 ? std::vector<Dtype>{float32, float16, bfloat16, int32, int16, uint16, uint64}
                               : std::vector<Dtype>{float16, float64};
      if (to == int32 || to == int16) {
        c.ref = ref_unary([](double x) { return std::trunc(x); });
      } else if (to == bool_) {
        c.ref = ref_unary([](double x) { return x != 0 ? 1.0 : 0.0; });
      } else {
        c.ref = ref_unary([](double x) { return x; });
      }
      // Finite differences in float64 see the rounding of a narrower type.
      if (to == float64) c.diff = {0};
      add(std::move(c));
    }
  }
  for (const auto& shape : {Shape{3, 5}, Shape{2, 3, 4}, Shape{}, Shape{0, 4}}) {
    add({.op = "copy",
         .primitive = "Copy",
         .name = test::fmt(shape),
         .fn = [](const Arrays& x) { return Arrays{copy(x[0])}; },
         .inputs = {in(shape)},
         .dtypes = kFloatsInt,
         .ref = ref_unary([](double x) { return x; }),
         .diff = {0},
         .grad2 = true});
    add({.op = "contiguous",
         .primitive = "Copy",
         .name = test::fmt(shape),
         .fn = [](const Arrays& x) { return Arrays{contiguous(transpose(x[0]))}; },
         .inputs = {in(shape)},
         .dtypes = kFloatsInt,
         .diff = {0}});
  }
}

}  // namespace kiln::harness
