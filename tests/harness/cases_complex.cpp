// Harness cases of complex64 and kiln::fft. The harness's inputs and
// outputs are real: a complex value is built from two real inputs (its real
// and imaginary parts) and each complex output comes back as its real and
// imaginary parts, so the finite-difference checks see the complex ops (and
// their conjugated rules) as maps between real arrays. References are
// std::complex<double> loops and the naive DFT of tests/fft_reference.h.
// Complex values compute in complex64 whatever the input dtype, so the
// finite differences carry float32 noise: fd_rtol is loose (a wrong rule
// is off by O(1)).
#include <complex>
#include <functional>
#include <numeric>

#include "fft_reference.h"
#include "harness/harness.h"
#include "test_util.h"

namespace kiln::harness {
namespace {

using cdouble = std::complex<double>;
using test::CTensor;
constexpr double kComplexFd = 3e-2;

// z = re + i im (complex64).
array cplx(const array& re, const array& im) { return astype(re, complex64) + array(complex64_t(0.0f, 1.0f)) * im; }
Arrays parts(const array& z) { return {real(z), imag(z)}; }

// The complex values of inputs re, im (float64 arrays), broadcast to `shape`.
CTensor ctensor(const array& re, const array& im, const Shape& shape) {
  auto a = broadcast_values(re, shape), b = broadcast_values(im, shape);
  CTensor t{shape, std::vector<cdouble>(a.size())};
  for (size_t i = 0; i < a.size(); ++i) t.v[i] = {a[i], b[i]};
  return t;
}
CTensor transposed(const CTensor& t) {  // 2-d
  CTensor out{{t.shape[1], t.shape[0]}, std::vector<cdouble>(t.v.size())};
  for (int i = 0; i < t.shape[0]; ++i)
    for (int j = 0; j < t.shape[1]; ++j) out.v[j * t.shape[0] + i] = t.v[i * t.shape[1] + j];
  return out;
}
std::vector<std::vector<double>> split(const CTensor& t, bool real_only = false) {
  std::vector<double> re, im;
  for (auto z : t.v) re.push_back(z.real()), im.push_back(z.imag());
  if (real_only) return {re};
  return {re, im};
}

using UFn = array (*)(const array&, StreamOrDevice);
using BFn = array (*)(const array&, const array&, StreamOrDevice);

struct ComplexUnary {
  const char* op;
  const char* primitive;
  UFn fn;
  cdouble (*ref)(cdouble);
  bool real_out;  // abs: a float32 result
  // The imaginary parts' range: ops with a branch cut (or poles) on the
  // real axis keep them away from it, so finite differences never cross it.
  double im_lo = -1.5, im_hi = 1.5;
  bool diff = true;  // sign: not complex-differentiable (MLX: a zero gradient)
};
constexpr double kOffAxis = 0.3;

const ComplexUnary kUnary[] = {
    {"abs", "Unary:abs", abs, [](cdouble z) { return cdouble(std::abs(z)); }, true},
    {"negative", "Unary:negative", negative, [](cdouble z) { return -z; }, false},
    {"square", "Unary:square", square, [](cdouble z) { return z * z; }, false},
    {"sqrt", "Unary:sqrt", sqrt, [](cdouble z) { return std::sqrt(z); }, false},
    {"exp", "Unary:exp", exp, [](cdouble z) { return std::exp(z); }, false},
    {"log", "Unary:log", log, [](cdouble z) { return std::log(z); }, false},
    {"sin", "Unary:sin", sin, [](cdouble z) { return std::sin(z); }, false},
    {"cos", "Unary:cos", cos, [](cdouble z) { return std::cos(z); }, false},
    {"tan", "Unary:tan", tan, [](cdouble z) { return std::tan(z); }, false, kOffAxis},
    {"arcsin", "Unary:arcsin", arcsin, [](cdouble z) { return std::asin(z); }, false, kOffAxis},
    {"arccos", "Unary:arccos", arccos, [](cdouble z) { return std::acos(z); }, false, kOffAxis},
    {"arctan", "Unary:arctan", arctan, [](cdouble z) { return std::atan(z); }, false},
    {"sinh", "Unary:sinh", sinh, [](cdouble z) { return std::sinh(z); }, false},
    {"cosh", "Unary:cosh", cosh, [](cdouble z) { return std::cosh(z); }, false},
    {"tanh", "Unary:tanh", tanh, [](cdouble z) { return std::tanh(z); }, false},
    {"arcsinh", "Unary:arcsinh", arcsinh, [](cdouble z) { return std::asinh(z); }, false},
    {"arccosh", "Unary:arccosh", arccosh, [](cdouble z) { return std::acosh(z); }, false, kOffAxis},
    {"arctanh", "Unary:arctanh", arctanh, [](cdouble z) { return std::atanh(z); }, false, kOffAxis},
    {"log1p", "Unary:log1p", log1p, [](cdouble z) { return std::log(1.0 + z); }, false},
    {"log2", "Unary:log2", log2, [](cdouble z) { return std::log(z) / std::log(2.0); }, false},
    {"log10", "Unary:log10", log10, [](cdouble z) { return std::log10(z); }, false},
    {"rsqrt", "Unary:rsqrt", rsqrt, [](cdouble z) { return 1.0 / std::sqrt(z); }, false},
    {"sign", "Unary:sign", sign, [](cdouble z) { return z / std::abs(z); }, false, -1.5, 1.5, false},
    {"conjugate", "Unary:conjugate", conjugate, [](cdouble z) { return std::conj(z); }, false},
    {"conj", "Unary:conjugate", conj, [](cdouble z) { return std::conj(z); }, false},
    {"real", "Real", real, [](cdouble z) { return cdouble(z.real()); }, true},
    {"imag", "Imag", imag, [](cdouble z) { return cdouble(z.imag()); }, true},
};

void register_unary() {
  for (const auto& u : kUnary) {
    for (bool transpose_z : {false, true}) {
      Shape s = transpose_z ? Shape{4, 3} : Shape{3, 4};
      add({.op = u.op,
           .primitive = u.primitive,
           .name = std::string("complex64 ") + (transpose_z ? "(4,3)^T" : "(3,4)"),
           .fn = [u, transpose_z](const Arrays& x) {
             array z = cplx(x[0], x[1]);
             if (transpose_z) z = transpose(z);
             array r = u.fn(z, {});
             return u.real_out ? Arrays{r} : parts(r);
           },
           // Away from 0 and the negative real axis (log's and sqrt's cut).
           .inputs = {in(s, 0.2, 2.0), in(s, u.im_lo, u.im_hi)},
           .dtypes = {float32},
           .ref = [u, s, transpose_z](const Arrays& x) {
             CTensor z = ctensor(x[0], x[1], s);
             if (transpose_z) z = transposed(z);
             for (auto& v : z.v) v = u.ref(v);
             return split(z, u.real_out);
           },
           .diff = u.diff ? std::vector<int>{0, 1} : std::vector<int>{},
           .fd_rtol = kComplexFd});
    }
  }
}

// numpy's order of complex numbers: the real part, then the imaginary part.
bool complex_less(cdouble a, cdouble b) { return a.real() < b.real() || (a.real() == b.real() && a.imag() < b.imag()); }

struct ComplexBinary {
  const char* op;
  BFn fn;
  cdouble (*ref)(cdouble, cdouble);
};

void register_binary() {
  const ComplexBinary kBinary[] = {
      {"add", kiln::add, [](cdouble a, cdouble b) { return a + b; }},
      {"subtract", subtract, [](cdouble a, cdouble b) { return a - b; }},
      {"multiply", multiply, [](cdouble a, cdouble b) { return a * b; }},
      {"divide", divide, [](cdouble a, cdouble b) { return a / b; }},
      // a ranges over the whole square (-2, 2)^2, across log's cut: power's
      // own cases below keep a in the right half-plane.
      {"maximum", maximum, [](cdouble a, cdouble b) { return complex_less(b, a) ? a : b; }},
      {"minimum", minimum, [](cdouble a, cdouble b) { return complex_less(a, b) ? a : b; }},
  };
  for (const auto& b : kBinary) {
    for (bool broadcast : {false, true}) {
      Shape sa{3, 4}, sb = broadcast ? Shape{4} : Shape{3, 4};
      add({.op = b.op,
           .primitive = std::string("Binary:") + b.op,
           .name = std::string("complex64 (3,4) ") + test::fmt(sb),
           .fn = [b](const Arrays& x) { return parts(b.fn(cplx(x[0], x[1]), cplx(x[2], x[3]), {})); },
           .inputs = {in(sa), in(sa), in(sb, 0.5, 2.0), in(sb, 0.5, 2.0)},
           .dtypes = {float32},
           .ref = [b, sa](const Arrays& x) {
             CTensor p = ctensor(x[0], x[1], sa), q = ctensor(x[2], x[3], sa);
             for (size_t i = 0; i < p.v.size(); ++i) p.v[i] = b.ref(p.v[i], q.v[i]);
             return split(p);
           },
           .diff = {0, 1, 2, 3},
           .fd_rtol = kComplexFd});
    }
    // A complex64 with a real operand: the real one is promoted.
    add({.op = b.op,
         .primitive = std::string("Binary:") + b.op,
         .name = "complex64 (3,4) with float32 (3,4)",
         .fn = [b](const Arrays& x) { return parts(b.fn(cplx(x[0], x[1]), x[2], {})); },
         .inputs = {in({3, 4}), in({3, 4}), in({3, 4}, 0.5, 2.0)},
         .dtypes = {float32},
         .ref = [b](const Arrays& x) {
           CTensor p = ctensor(x[0], x[1], {3, 4});
           auto q = values(x[2]);
           for (size_t i = 0; i < p.v.size(); ++i) p.v[i] = b.ref(p.v[i], cdouble(q[i]));
           return split(p);
         },
         .diff = {0, 1, 2},
         .fd_rtol = kComplexFd});
  }
  // power: z in the right half-plane (log's cut is the negative real axis).
  for (bool broadcast : {false, true}) {
    Shape sa{3, 4}, sb = broadcast ? Shape{4} : Shape{3, 4};
    add({.op = "power",
         .primitive = "Binary:power",
         .name = std::string("complex64 (3,4) ") + test::fmt(sb),
         .fn = [](const Arrays& x) { return parts(power(cplx(x[0], x[1]), cplx(x[2], x[3]))); },
         .inputs = {in(sa, 0.2, 2.0), in(sa, -1.5, 1.5), in(sb, -1.5, 1.5), in(sb, -1.0, 1.0)},
         .dtypes = {float32},
         .ref = [sa](const Arrays& x) {
           CTensor p = ctensor(x[0], x[1], sa), q = ctensor(x[2], x[3], sa);
           for (size_t i = 0; i < p.v.size(); ++i) p.v[i] = std::pow(p.v[i], q.v[i]);
           return split(p);
         },
         .diff = {0, 1, 2, 3},
         .fd_rtol = kComplexFd});
  }
  // The orderings: w shares z's real part in about half of the elements
  // (x[2] > 0) and is z itself in about a quarter (x[2] > 1), so the
  // imaginary part decides and ties occur.
  using CmpFn = array (*)(const array&, const array&, StreamOrDevice);
  const std::tuple<const char*, CmpFn, bool (*)(cdouble, cdouble)> kCompare[] = {
      {"less", less, [](cdouble a, cdouble b) { return complex_less(a, b); }},
      {"less_equal", less_equal, [](cdouble a, cdouble b) { return !complex_less(b, a); }},
      {"greater", greater, [](cdouble a, cdouble b) { return complex_less(b, a); }},
      {"greater_equal", greater_equal, [](cdouble a, cdouble b) { return !complex_less(a, b); }},
  };
  for (const auto& [op, fn, ref] : kCompare) {
    add({.op = op,
         .primitive = std::string("Binary:") + op,
         .name = "complex64 (3,4), ties",
         .fn = [fn](const Arrays& x) {
           array zero = array(0.0, x[2].dtype()), one = array(1.0, x[2].dtype());
           array w = cplx(where(x[2] > zero, x[0], x[3]), where(x[2] > one, x[1], x[4]));
           return Arrays{fn(cplx(x[0], x[1]), w, {})};
         },
         .inputs = {in({3, 4}), in({3, 4}), in({3, 4}), in({3, 4}), in({3, 4})},
         .dtypes = {float32},
         .ref = [ref](const Arrays& x) {
           auto a = values(x[0]), b = values(x[1]), c = values(x[2]), d = values(x[3]), e = values(x[4]);
           std::vector<double> r;
           for (size_t i = 0; i < a.size(); ++i) {
             cdouble z(a[i], b[i]), w(c[i] > 0 ? a[i] : d[i], c[i] > 1 ? b[i] : e[i]);
             r.push_back(ref(z, w) ? 1.0 : 0.0);
           }
           return std::vector<std::vector<double>>{r};
         },
         .vmap = true});
  }
  // equal / not_equal: half of the elements of w are z's own.
  for (bool eq : {true, false}) {
    add({.op = eq ? "equal" : "not_equal",
         .primitive = eq ? "Binary:equal" : "Binary:not_equal",
         .name = "complex64 (3,4)",
         .fn = [eq](const Arrays& x) {
           array z = cplx(x[0], x[1]);
           array w = where(x[2] > array(0.0, x[2].dtype()), z, cplx(x[1], x[0]));
           return Arrays{eq ? equal(z, w) : not_equal(z, w)};
         },
         .inputs = {in({3, 4}), in({3, 4}), in({3, 4})},
         .dtypes = {float32},
         .ref = [eq](const Arrays& x) {
           auto a = values(x[0]), b = values(x[1]), c = values(x[2]);
           std::vector<double> r;
           for (size_t i = 0; i < a.size(); ++i) {
             bool same = c[i] > 0 || (a[i] == b[i]);
             r.push_back(same == eq ? 1.0 : 0.0);
           }
           return std::vector<std::vector<double>>{r};
         },
         .vmap = true});
  }
}

void register_other() {
  // where on complex values.
  add({.op = "where",
       .primitive = "Select",
       .name = "complex64 (3,4)",
       .fn = [](const Arrays& x) { return parts(where(x[4], cplx(x[0], x[1]), cplx(x[2], x[3]))); },
       .inputs = {in({3, 4}), in({3, 4}), in({4}), in({4}), fixed({3, 4}, bool_, 0, 2)},
       .dtypes = {float32},
       .ref = [](const Arrays& x) {
         CTensor p = ctensor(x[0], x[1], {3, 4}), q = ctensor(x[2], x[3], {3, 4});
         auto c = values(x[4]);
         for (size_t i = 0; i < p.v.size(); ++i) p.v[i] = c[i] != 0 ? p.v[i] : q.v[i];
         return split(p);
       },
       .diff = {0, 1, 2, 3},
       .fd_rtol = kComplexFd});
  // sum and prod over an axis, all axes.
  for (bool is_sum : {true, false}) {
    for (int axis : {-1, 0, 2}) {  // 2: every axis
      add({.op = is_sum ? "sum" : "prod",
           .primitive = is_sum ? "Reduce:sum" : "Reduce:prod",
           .name = "complex64 (3,4) axis " + std::to_string(axis),
           .fn = [is_sum, axis](const Arrays& x) {
             array z = cplx(x[0], x[1]);
             array r = axis == 2 ? (is_sum ? sum(z) : prod(z)) : (is_sum ? sum(z, axis) : prod(z, axis));
             return parts(r);
           },
           .inputs = {in({3, 4}, 0.5, 1.2), in({3, 4}, -0.5, 0.5)},
           .dtypes = {float32},
           .ref = [is_sum, axis](const Arrays& x) {
             CTensor z = ctensor(x[0], x[1], {3, 4});
             CTensor out;
             auto fold = [&](const std::vector<cdouble>& g) {
               cdouble acc = is_sum ? 0.0 : 1.0;
               for (auto v : g) acc = is_sum ? acc + v : acc * v;
               return acc;
             };
             if (axis == 2) {
               out = {{}, {fold(z.v)}};
             } else if (axis == 0) {
               out.shape = {4};
               for (int j = 0; j < 4; ++j) out.v.push_back(fold({z.v[j], z.v[4 + j], z.v[8 + j]}));
             } else {
               out.shape = {3};
               for (int i = 0; i < 3; ++i) out.v.push_back(fold({z.v.begin() + 4 * i, z.v.begin() + 4 * i + 4}));
             }
             return split(out);
           },
           .diff = {0, 1},
           .fd_rtol = kComplexFd});
    }
  }
  // matmul: 2-d and a broadcast batch.
  for (bool batched : {false, true}) {
    Shape sa = batched ? Shape{2, 3, 4} : Shape{3, 4}, sb{4, 5};
    add({.op = "matmul",
         .primitive = "Matmul",
         .name = "complex64 " + test::fmt(sa) + " x " + test::fmt(sb),
         .fn = [](const Arrays& x) { return parts(matmul(cplx(x[0], x[1]), cplx(x[2], x[3]))); },
         .inputs = {in(sa), in(sa), in(sb), in(sb)},
         .dtypes = {float32},
         .ref = [sa, sb](const Arrays& x) {
           CTensor a = ctensor(x[0], x[1], sa), b = ctensor(x[2], x[3], sb);
           int batch = sa.size() == 3 ? sa[0] : 1;
           CTensor c;
           c.shape = sa.size() == 3 ? Shape{batch, 3, 5} : Shape{3, 5};
           for (int t = 0; t < batch; ++t)
             for (int i = 0; i < 3; ++i)
               for (int j = 0; j < 5; ++j) {
                 cdouble acc = 0;
                 for (int k = 0; k < 4; ++k) acc += a.v[t * 12 + i * 4 + k] * b.v[k * 5 + j];
                 c.v.push_back(acc);
               }
           return split(c);
         },
         .diff = {0, 1, 2, 3},
         .fd_rtol = kComplexFd});
  }
  // Layout ops move complex64 elements like any 8-byte type.
  auto layout_case = [](const char* op, const char* prim, std::function<array(const array&)> f) {
    add({.op = op,
         .primitive = prim,
         .name = "complex64 (3,4)",
         .fn = [f](const Arrays& x) { return parts(f(cplx(x[0], x[1]))); },
         .inputs = {in({3, 4}), in({3, 4})},
         .dtypes = {float32},
         .ref = [f](const Arrays& x) {
           // The same movement on the real and imaginary parts separately.
           array re = f(x[0]), im = f(x[1]);
           return std::vector<std::vector<double>>{values(re), values(im)};
         },
         .diff = {0, 1},
         .fd_rtol = kComplexFd});
  };
  layout_case("reshape", "Reshape", [](const array& z) { return reshape(z, {2, 6}); });
  layout_case("transpose", "Transpose", [](const array& z) { return transpose(z); });
  layout_case("slice", "Slice", [](const array& z) { return slice(z, {0, 1}, {3, 4}, {2, 2}); });
  layout_case("copy", "Copy", [](const array& z) { return copy(transpose(z)); });
  layout_case("concatenate", "Concatenate", [](const array& z) { return concatenate({z, slice(z, {1, 0}, {3, 4})}, 0); });
  layout_case("broadcast_to", "Broadcast", [](const array& z) { return broadcast_to(z, {2, 3, 4}); });
  // astype: real <-> complex64.
  add({.op = "astype",
       .primitive = "Copy",
       .name = "float32 -> complex64 -> float32",
       .fn = [](const Arrays& x) {
         array z = astype(x[0], complex64);
         return Arrays{real(z), imag(z), astype(z * array(complex64_t(1.0f, 1.0f)), float32)};
       },
       .inputs = {in({3, 4})},
       .dtypes = {float32},
       .ref = [](const Arrays& x) {
         auto v = values(x[0]);
         return std::vector<std::vector<double>>{v, std::vector<double>(v.size(), 0.0), v};
       },
       .diff = {0},
       .fd_rtol = kComplexFd});
}

// ---- kiln::fft ----

using FftFn = std::function<array(const array&)>;
using FftRef = std::function<CTensor(const CTensor&)>;

// A transform of a complex input (real_input: of the real input x[0]).
void fft_case(const std::string& op, const std::string& name, const Shape& shape, bool real_input, bool real_output,
              FftFn f, FftRef ref) {
  Case c{.op = op, .primitive = "FFT", .name = name};
  c.fn = [f, real_input, real_output](const Arrays& x) {
    array r = f(real_input ? x[0] : cplx(x[0], x[1]));
    return real_output ? Arrays{r} : parts(r);
  };
  c.inputs = real_input ? std::vector<Input>{in(shape)} : std::vector<Input>{in(shape), in(shape)};
  c.dtypes = {float32};
  c.ref = [ref, shape, real_input, real_output](const Arrays& x) {
    CTensor z = real_input ? ctensor(x[0], array(0.0, float64), shape) : ctensor(x[0], x[1], shape);
    return split(ref(z), real_output);
  };
  c.diff = real_input ? std::vector<int>{0} : std::vector<int>{0, 1};
  c.fd_rtol = kComplexFd;
  c.rtol_scale = 4.0;  // sums of up to 64 terms in float
  add(std::move(c));
}

void register_fft() {
  using fft::FFTNorm;
  const Shape s2{5, 6};
  // 1-d along each axis, with n padding and truncating.
  for (int axis : {-1, 0}) {
    int len = s2[axis < 0 ? 1 : 0];
    for (int n : {0, 3, 8}) {  // 0: the default n
      std::string name = test::fmt(s2) + " axis " + std::to_string(axis) + (n ? " n " + std::to_string(n) : "");
      int ax = axis < 0 ? 1 : 0, nn = n ? n : len;
      fft_case("fft::fft", name, s2, false, false,
               [n, axis](const array& z) { return n ? fft::fft(z, n, axis) : fft::fft(z, axis); },
               [nn, ax](const CTensor& z) { return test::ref_fftn(z, {nn}, {ax}, false); });
      fft_case("fft::ifft", name, s2, false, false,
               [n, axis](const array& z) { return n ? fft::ifft(z, n, axis) : fft::ifft(z, axis); },
               [nn, ax](const CTensor& z) { return test::ref_fftn(z, {nn}, {ax}, true); });
      fft_case("fft::rfft", name, s2, true, false,
               [n, axis](const array& x) { return n ? fft::rfft(x, n, axis) : fft::rfft(x, axis); },
               [nn, ax](const CTensor& z) { return test::ref_rfftn(z, {nn}, {ax}); });
      int out_n = n ? n : 2 * (len - 1);
      fft_case("fft::irfft", name, s2, false, true,
               [n, axis](const array& z) { return n ? fft::irfft(z, n, axis) : fft::irfft(z, axis); },
               [out_n, ax](const CTensor& z) { return test::ref_irfftn(z, {out_n}, {ax}); });
    }
  }
  // The norms.
  for (auto [norm, nm] : {std::pair{FFTNorm::Ortho, "ortho"}, std::pair{FFTNorm::Forward, "forward"}}) {
    double fwd = norm == FFTNorm::Ortho ? 1.0 / std::sqrt(6.0) : 1.0 / 6.0;
    fft_case("fft::fft", std::string("norm ") + nm, s2, false, false,
             [norm](const array& z) { return fft::fft(z, -1, norm); },
             [fwd](const CTensor& z) {
               CTensor r = test::ref_fftn(z, {6}, {1}, false);
               for (auto& v : r.v) v *= fwd;
               return r;
             });
    fft_case("fft::ifft", std::string("norm ") + nm, s2, false, false,
             [norm](const array& z) { return fft::ifft(z, -1, norm); },
             [fwd](const CTensor& z) {
               // The normalized inverse times n, over the forward's scale.
               CTensor r = test::ref_fftn(z, {6}, {1}, true);
               for (auto& v : r.v) v *= 1.0 / fwd;
               return r;
             });
  }
  // 2-d and n-d, default axes and given ones, with sizes.
  const Shape s3{3, 4, 5};
  fft_case("fft::fft2", "(3,4,5)", s3, false, false, [](const array& z) { return fft::fft2(z); },
           [](const CTensor& z) { return test::ref_fftn(z, {4, 5}, {1, 2}, false); });
  fft_case("fft::fft2", "(3,4,5) s (3,6) axes (0,2)", s3, false, false,
           [](const array& z) { return fft::fft2(z, {3, 6}, {0, 2}); },
           [](const CTensor& z) { return test::ref_fftn(z, {3, 6}, {0, 2}, false); });
  fft_case("fft::ifft2", "(3,4,5)", s3, false, false, [](const array& z) { return fft::ifft2(z); },
           [](const CTensor& z) { return test::ref_fftn(z, {4, 5}, {1, 2}, true); });
  fft_case("fft::ifft2", "(3,4,5) s (2,7) axes (2,0)", s3, false, false,
           [](const array& z) { return fft::ifft2(z, {7, 2}, {2, 0}); },
           [](const CTensor& z) { return test::ref_fftn(z, {7, 2}, {2, 0}, true); });
  fft_case("fft::fftn", "(3,4,5)", s3, false, false, [](const array& z) { return fft::fftn(z); },
           [](const CTensor& z) { return test::ref_fftn(z, {3, 4, 5}, {0, 1, 2}, false); });
  fft_case("fft::fftn", "(3,4,5) axes (0)", s3, false, false, [](const array& z) { return fft::fftn(z, {0}); },
           [](const CTensor& z) { return test::ref_fftn(z, {3}, {0}, false); });
  fft_case("fft::ifftn", "(3,4,5)", s3, false, false, [](const array& z) { return fft::ifftn(z); },
           [](const CTensor& z) { return test::ref_fftn(z, {3, 4, 5}, {0, 1, 2}, true); });
  fft_case("fft::ifftn", "(3,4,5) s (2,4,6)", s3, false, false,
           [](const array& z) { return fft::ifftn(z, {2, 4, 6}, {0, 1, 2}); },
           [](const CTensor& z) { return test::ref_fftn(z, {2, 4, 6}, {0, 1, 2}, true); });
  fft_case("fft::rfft2", "(3,4,5)", s3, true, false, [](const array& x) { return fft::rfft2(x); },
           [](const CTensor& z) { return test::ref_rfftn(z, {4, 5}, {1, 2}); });
  fft_case("fft::rfft2", "(3,4,5) s (3,4) axes (2,0)", s3, true, false,
           [](const array& x) { return fft::rfft2(x, {3, 4}, {2, 0}); },
           [](const CTensor& z) { return test::ref_rfftn(z, {3, 4}, {2, 0}); });
  fft_case("fft::irfft2", "(3,4,5)", s3, false, true, [](const array& z) { return fft::irfft2(z); },
           [](const CTensor& z) { return test::ref_irfftn(z, {4, 8}, {1, 2}); });
  fft_case("fft::irfft2", "(3,4,5) s (3,7) axes (2,0)", s3, false, true,
           [](const array& z) { return fft::irfft2(z, {3, 7}, {2, 0}); },
           [](const CTensor& z) { return test::ref_irfftn(z, {3, 7}, {2, 0}); });
  fft_case("fft::rfftn", "(3,4,5)", s3, true, false, [](const array& x) { return fft::rfftn(x); },
           [](const CTensor& z) { return test::ref_rfftn(z, {3, 4, 5}, {0, 1, 2}); });
  fft_case("fft::rfftn", "(3,4,5) axes (1)", s3, true, false, [](const array& x) { return fft::rfftn(x, {1}); },
           [](const CTensor& z) { return test::ref_rfftn(z, {4}, {1}); });
  fft_case("fft::irfftn", "(3,4,5)", s3, false, true, [](const array& z) { return fft::irfftn(z); },
           [](const CTensor& z) { return test::ref_irfftn(z, {3, 4, 8}, {0, 1, 2}); });
  fft_case("fft::irfftn", "(3,4,5) s (4,5) axes (0,1)", s3, false, true,
           [](const array& z) { return fft::irfftn(z, {4, 5}, {0, 1}); },
           [](const CTensor& z) { return test::ref_irfftn(z, {4, 5}, {0, 1}); });
  // fftshift / ifftshift (a roll, exact) and the sample frequencies.
  for (bool inverse : {false, true}) {
    for (bool all : {true, false}) {
      add({.op = inverse ? "fft::ifftshift" : "fft::fftshift",
           .primitive = "composite",
           .name = all ? "(5,6)" : "(5,6) axes (0)",
           .fn = [inverse, all](const Arrays& x) {
             if (all) return Arrays{inverse ? fft::ifftshift(x[0]) : fft::fftshift(x[0])};
             return Arrays{inverse ? fft::ifftshift(x[0], {0}) : fft::fftshift(x[0], {0})};
           },
           .inputs = {in({5, 6})},
           .ref = [inverse, all](const Arrays& x) {
             auto v = values(x[0]);
             std::vector<double> r(v.size());
             for (int i = 0; i < 5; ++i)
               for (int j = 0; j < 6; ++j) {
                 int si = (i + (inverse ? 5 - 5 / 2 : 5 / 2)) % 5;
                 int sj = all ? (j + (inverse ? 6 - 6 / 2 : 6 / 2)) % 6 : j;
                 r[si * 6 + sj] = v[i * 6 + j];
               }
             return std::vector<std::vector<double>>{r};
           },
           .diff = {0}});
    }
  }
  for (bool rfreq : {false, true}) {
    for (int n : {5, 8}) {
      add({.op = rfreq ? "fft::rfftfreq" : "fft::fftfreq",
           .primitive = "composite",
           .name = "n " + std::to_string(n) + " d 0.5",
           .fn = [rfreq, n](const Arrays&) { return Arrays{rfreq ? fft::rfftfreq(n, 0.5) : fft::fftfreq(n, 0.5)}; },
           .dtypes = {float32},
           .ref = [rfreq, n](const Arrays&) {
             std::vector<double> r;
             int m = rfreq ? n / 2 + 1 : n;
             for (int k = 0; k < m; ++k) r.push_back((k < (n + 1) / 2 || rfreq ? k : k - n) / (n * 0.5));
             return std::vector<std::vector<double>>{r};
           },
           .layouts = false,
           .vmap = false});
    }
  }
}

// linalg::eig / eigvals: eigenpairs are unique only up to order and phase,
// so the cases check invariants: the eigenvalues' sum and product against
// the trace and determinant, A V - V diag(w) = 0 and unit columns of V.
void register_eig() {
  const Shape s{2, 3, 3};
  add({.op = "linalg::eigvals",
       .primitive = "Eig",
       .name = "(2,3,3) trace and det",
       .fn = [](const Arrays& x) {
         array w = linalg::eigvals(x[0]);
         return Arrays{real(sum(w, -1)), imag(sum(w, -1)), real(prod(w, -1))};
       },
       .inputs = {in(s)},
       .dtypes = {float32},
       .ref = [](const Arrays& x) {
         auto v = values(x[0]);
         std::vector<double> tr, zero, det;
         for (int b = 0; b < 2; ++b) {
           const double* m = v.data() + 9 * b;
           tr.push_back(m[0] + m[4] + m[8]);
           zero.push_back(0.0);
           det.push_back(m[0] * (m[4] * m[8] - m[5] * m[7]) - m[1] * (m[3] * m[8] - m[5] * m[6]) +
                         m[2] * (m[3] * m[7] - m[4] * m[6]));
         }
         return std::vector<std::vector<double>>{tr, zero, det};
       },
       .rtol_scale = 4.0});
  add({.op = "linalg::eig",
       .primitive = "Eig",
       .name = "(2,3,3) residual and unit vectors",
       .fn = [](const Arrays& x) {
         auto [w, v] = linalg::eig(x[0]);
         array a = astype(x[0], complex64);
         array residual = abs(matmul(a, v) - v * expand_dims(w, -2));
         return Arrays{residual, sum(square(abs(v)), -2)};
       },
       .inputs = {in(s)},
       .dtypes = {float32},
       .ref = [](const Arrays&) {
         return std::vector<std::vector<double>>{std::vector<double>(18, 0.0), std::vector<double>(6, 1.0)};
       },
       .rtol_scale = 4.0});
}

}  // namespace

void register_complex() {
  register_unary();
  register_binary();
  register_other();
  register_fft();
  register_eig();
}

}  // namespace kiln::harness
