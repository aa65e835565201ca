// Random numbers from explicit keys (Philox-4x32-10 bits, see
// backend/common/philox.h); distributions are ordinary ops on those bits, so
// they run on any stream with identical results.
#include <cmath>
#include <mutex>

#include "core/array_desc.h"
#include "core/ops_util.h"
#include "core/primitives.h"
#include "kiln/ops.h"
#include "kiln/random.h"

namespace kiln::random {
namespace {

struct GlobalKey {
  std::mutex mutex;
  array key = random::key(0);
};
GlobalKey& global_key() {
  static GlobalKey* g = new GlobalKey();
  return *g;
}

// The given key, or a fresh one split off the global key.
array resolve_key(const std::optional<array>& key, const char* op) {
  if (key) {
    if (key->dtype() != uint32 || key->shape() != Shape{2}) {
      fail(op, "a key must be a uint32 array of shape (2)", {&*key});
    }
    return *key;
  }
  auto& g = global_key();
  std::lock_guard lock(g.mutex);
  array pair = random::split(g.key, 2, Device(Device::cpu));
  pair.eval();
  g.key = reshape(slice(pair, {0, 0}, {1, 2}), {2});
  array sub = reshape(slice(pair, {1, 0}, {2, 2}), {2});
  sub.eval();
  return sub;
}

void check_shape(const Shape& shape, const char* op) {
  for (int d : shape) {
    if (d < 0) throw Error(std::string("[") + op + "] negative dimension in shape " + format_shape(shape));
  }
}

// Uniform float32 in [0, 1) from the top 24 bits.
array unit_uniform(const Shape& shape, const array& key, Stream st) {
  array b = bits(shape, key, st);
  // Clearing the low 8 bits leaves a multiple of 256 below 2^32, which
  // float32 holds exactly: u = top 24 bits / 2^24 in [0, 1).
  array top = astype(subtract(b, remainder(b, array(256u, uint32), st), st), float32, st);
  return multiply(top, array(1.0f / 4294967296.0f), st);
}

}  // namespace

array key(uint64_t seed) {
  uint32_t k[2] = {static_cast<uint32_t>(seed >> 32), static_cast<uint32_t>(seed)};
  return array(std::vector<uint32_t>(k, k + 2), {2});
}

void seed(uint64_t s) {
  auto& g = global_key();
  std::lock_guard lock(g.mutex);
  g.key = key(s);
}

array bits(const Shape& shape, const std::optional<array>& key, StreamOrDevice s) {
  check_shape(shape, "random.bits");
  Stream st = to_stream(s);
  array k = resolve_key(key, "random.bits");
  return make_node<RandomBits>(shape, uint32, {k}, st, shape);
}

array split(const array& key, int num, StreamOrDevice s) {
  if (num < 1) throw Error("[random.split] number of keys must be positive, got " + std::to_string(num));
  return bits({num, 2}, resolve_key(key, "random.split"), s);
}

namespace {
// uniform's work; `op` is the distribution the user called (normal and
// bernoulli are built on it), for its error messages.
array uniform_as(const array& low, const array& high, const Shape& shape, Dtype dtype, const std::optional<array>& key,
                 StreamOrDevice s, const char* op) {
  if (!is_floating_point(dtype)) {
    throw Error(std::string("[") + op + "] needs a floating dtype, got " + dtype_name(dtype));
  }
  check_shape(shape, op);
  Shape bshape = broadcast_shapes(broadcast_shapes(low.shape(), high.shape(), op, {&low, &high}), shape,
                                  op, {&low, &high});
  if (bshape != shape) fail(op, "low and high do not broadcast to " + format_shape(shape), {&low, &high});
  Stream st = to_stream(s);
  array k = resolve_key(key, op);
  Dtype ct = dtype == float64 ? float64 : float32;
  array lo = astype(low, ct, st), hi = astype(high, ct, st);
  array u = astype(unit_uniform(shape, k, st), ct, st);
  array out = astype(add(lo, multiply(u, subtract(hi, lo, st), st), st), dtype, st);
  // Rounding to a narrow dtype can land on `high`; keep the interval open.
  array hi_cast = astype(high, dtype, st);
  return where(greater_equal(out, hi_cast, st), astype(low, dtype, st), out, st);
}

}  // namespace

array uniform(const array& low, const array& high, const Shape& shape, Dtype dtype, const std::optional<array>& key,
              StreamOrDevice s) {
  return uniform_as(low, high, shape, dtype, key, s, "random.uniform");
}

array uniform(const Shape& shape, Dtype dtype, const std::optional<array>& key, StreamOrDevice s) {
  return uniform(array(0.0f), array(1.0f), shape, dtype, key, s);
}
array uniform(const Shape& shape, const std::optional<array>& key, StreamOrDevice s) {
  return uniform(shape, float32, key, s);
}

array normal(const Shape& shape, Dtype dtype, const std::optional<array>& loc, const std::optional<array>& scale,
             const std::optional<array>& key, StreamOrDevice s) {
  if (!is_floating_point(dtype)) {
    throw Error(std::string("[random.normal] needs a floating dtype, got ") + dtype_name(dtype));
  }
  Stream st = to_stream(s);
  Dtype ct = dtype == float64 ? float64 : float32;
  // Inverse CDF: sqrt(2) * erfinv(u) for u uniform in (-1, 1).
  float lo = std::nextafter(-1.0f, 0.0f);
  array u = uniform_as(array(lo), array(1.0f), shape, ct, key, st, "random.normal");
  array z = multiply(erfinv(u, st), array(std::sqrt(2.0), ct), st);
  if (scale) z = multiply(z, astype(*scale, ct, st), st);
  if (loc) z = add(z, astype(*loc, ct, st), st);
  return astype(z, dtype, st);
}
array normal(const Shape& shape, Dtype dtype, float loc, float scale, const std::optional<array>& key,
             StreamOrDevice s) {
  return normal(shape, dtype, std::optional<array>(array(loc)), std::optional<array>(array(scale)), key, s);
}
array normal(const Shape& shape, float loc, float scale, const std::optional<array>& key, StreamOrDevice s) {
  return normal(shape, float32, loc, scale, key, s);
}
array normal(const Shape& shape, Dtype dtype, const std::optional<array>& key, StreamOrDevice s) {
  return normal(shape, dtype, std::nullopt, std::nullopt, key, s);
}
array normal(const Shape& shape, const std::optional<array>& key, StreamOrDevice s) {
  return normal(shape, float32, std::nullopt, std::nullopt, key, s);
}

array randint(const array& low, const array& high, const Shape& shape, Dtype dtype, const std::optional<array>& key,
              StreamOrDevice s) {
  if (!is_integral(dtype)) {
    throw Error(std::string("[random.randint] needs an integer or bool dtype, got ") + dtype_name(dtype));
  }
  check_shape(shape, "random.randint");
  // An empty range [low, high) has nothing to draw from. Bounds already
  // evaluated (C++ scalars, constants) are checked here; bounds still being
  // computed clamp to low, as before.
  if (low.desc()->get_status() == Status::available && high.desc()->get_status() == Status::available &&
      low.size() > 0 && high.size() > 0) {
    broadcast_shapes(low.shape(), high.shape(), "random.randint", {&low, &high});
    array lo64 = astype(low, int64, Device(Device::cpu)), hi64 = astype(high, int64, Device(Device::cpu));
    if (any(greater_equal(lo64, hi64, Device(Device::cpu)), false, Device(Device::cpu)).item<bool>()) {
      std::string bounds = low.size() == 1 && high.size() == 1
                               ? "low " + std::to_string(lo64.item<int64_t>()) + ", high " +
                                     std::to_string(hi64.item<int64_t>())
                               : "some low >= high";
      fail("random.randint", "needs low < high (an empty range); got " + bounds, {&low, &high});
    }
  }
  Stream st = to_stream(s);
  array k = resolve_key(key, "random.randint");
  array lo = broadcast_to(astype(low, int64, st), shape, st);
  array span = maximum(subtract(astype(high, int64, st), lo, st), array(int64_t{1}), st);
  // 64 random bits per element (two words, combined with wrapping int64
  // arithmetic) taken modulo the span: the bias is below span / 2^64.
  Shape two = shape;
  two.push_back(2);
  std::vector<array> words = kiln::split(bits(two, k, st), 2, -1, st);
  array hi = astype(reshape(words[0], shape, st), int64, st);
  array lo64 = astype(reshape(words[1], shape, st), int64, st);
  array b = add(multiply(hi, array(int64_t{1} << 32), st), lo64, st);
  array r = add(lo, remainder(b, span, st), st);
  return astype(r, dtype, st);
}

array bernoulli(const array& p, const Shape& shape, const std::optional<array>& key, StreamOrDevice s) {
  if (!is_floating_point(p.dtype())) fail("random.bernoulli", "the probability p must be a floating array", {&p});
  Stream st = to_stream(s);
  array u = uniform_as(array(0.0f), array(1.0f), shape, float32, key, st, "random.bernoulli");
  if (broadcast_shapes(p.shape(), shape, "random.bernoulli", {&p}) != shape) {
    fail("random.bernoulli", "p does not broadcast to " + format_shape(shape), {&p});
  }
  return less(u, broadcast_to(astype(p, float32, st), shape, st), st);
}

array bernoulli(const array& p, const std::optional<array>& key, StreamOrDevice s) {
  return bernoulli(p, p.shape(), key, s);
}
array bernoulli(const std::optional<array>& key, StreamOrDevice s) { return bernoulli(array(0.5f), key, s); }

}  // namespace kiln::random
