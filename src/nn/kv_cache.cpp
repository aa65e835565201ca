// KVCache and RotatingKVCache (include/kiln/kv_cache.h): mlx-lm's caches.
// Each step writes through slice_update into a buffer the cache owns; the
// update donates that buffer to its output, so a decode step writes only
// the new tokens.
#include "kiln/kv_cache.h"

#include <algorithm>
#include <string>

#include "core/ops_util.h"
#include "kiln/ops.h"

namespace kiln::nn {
namespace {

// v[:, :, begin:end, :]
array tokens(const array& v, int begin, int end) {
  return slice(v, {0, 0, begin, 0}, {v.shape(0), v.shape(1), end, v.shape(3)});
}

void check_update(const char* op, const array& keys, const array& values, const std::optional<array>& cached) {
  if (keys.ndim() != 4 || values.ndim() != 4) {
    fail(op, "keys and values must be [B, heads, tokens, head_dim]", {&keys, &values});
  }
  if (keys.shape(0) != values.shape(0) || keys.shape(1) != values.shape(1) || keys.shape(2) != values.shape(2)) {
    fail(op, "keys and values must agree on batch, heads and tokens", {&keys, &values});
  }
  if (cached && (cached->shape(0) != keys.shape(0) || cached->shape(1) != keys.shape(1) ||
                 cached->shape(3) != keys.shape(3) || cached->dtype() != keys.dtype())) {
    fail(op, "keys do not match the cached ones (" + format_shape(cached->shape()) + " " +
                 dtype_name(cached->dtype()) + ")",
         {&keys, &values});
  }
}

// A buffer of `capacity` tokens shaped like v.
array empty_like_tokens(const array& v, int capacity) {
  return zeros({v.shape(0), v.shape(1), capacity, v.shape(3)}, v.dtype());
}

}  // namespace

KVCache::KVCache(int step) : step_(step) {
  if (step <= 0) throw Error("[KVCache] step must be positive, got " + std::to_string(step));
}

std::pair<array, array> KVCache::update_and_fetch(const array& keys, const array& values) {
  check_update("KVCache", keys, values, keys_);
  const int prev = offset_, n = keys.shape(2);
  if (!keys_ || prev + n > keys_->shape(2)) {
    // Grow by whole steps: the one copy of the cache per `step` tokens.
    const int extra = (n + step_ - 1) / step_ * step_;
    array new_k = empty_like_tokens(keys, extra), new_v = empty_like_tokens(values, extra);
    if (keys_) {
      keys_ = concatenate({tokens(*keys_, 0, prev), new_k}, 2);
      values_ = concatenate({tokens(*values_, 0, prev), new_v}, 2);
    } else {
      keys_ = new_k;
      values_ = new_v;
    }
  }
  offset_ += n;
  const array& k = *keys_;
  const array& v = *values_;
  keys_ = slice_update(k, keys, {0, 0, prev, 0}, {k.shape(0), k.shape(1), offset_, k.shape(3)});
  values_ = slice_update(v, values, {0, 0, prev, 0}, {v.shape(0), v.shape(1), offset_, v.shape(3)});
  return keys_and_values();
}

std::pair<array, array> KVCache::keys_and_values() const {
  if (!keys_) throw Error("[KVCache] the cache is empty");
  if (offset_ < keys_->shape(2)) return {tokens(*keys_, 0, offset_), tokens(*values_, 0, offset_)};
  return {*keys_, *values_};
}

int KVCache::trim(int n) {
  n = std::clamp(n, 0, offset_);
  offset_ -= n;
  return n;
}

RotatingKVCache::RotatingKVCache(int max_size, int keep, int step) : max_size_(max_size), keep_(keep), step_(step) {
  if (max_size <= 0 || keep < 0 || keep >= max_size || step <= 0) {
    throw Error("[RotatingKVCache] needs max_size > keep >= 0 and step > 0; got max_size " +
                std::to_string(max_size) + ", keep " + std::to_string(keep) + ", step " + std::to_string(step));
  }
}

std::pair<array, array> RotatingKVCache::update_and_fetch(const array& keys, const array& values) {
  check_update("RotatingKVCache", keys, values, keys_);
  if (keys.shape(2) == 1) return update_in_place(keys, values);
  return update_concat(keys, values);
}

array RotatingKVCache::temporal_order(const array& v) const {
  const int len = v.shape(2);
  if (idx_ == len) return v;
  if (idx_ < offset_) return concatenate({tokens(v, 0, keep_), tokens(v, idx_, len), tokens(v, keep_, idx_)}, 2);
  return tokens(v, 0, idx_);
}

array RotatingKVCache::trim_front(int trim_size, const array& v, const std::optional<array>& append) const {
  std::vector<array> parts;
  if (trim_size > 0) {
    parts = {tokens(v, 0, keep_), tokens(v, trim_size + keep_, v.shape(2))};
  } else {
    parts = {v};
  }
  if (append) parts.push_back(*append);
  return parts.size() == 1 ? parts[0] : concatenate(parts, 2);
}

std::pair<array, array> RotatingKVCache::update_concat(const array& keys, const array& values) {
  if (!keys_) {
    keys_ = keys;
    values_ = values;
  } else {
    // Temporal order first, so that the kept context is the latest; at most
    // max_size - 1 old tokens stay, so each new token sees max_size.
    keys_ = temporal_order(*keys_);
    values_ = temporal_order(*values_);
    idx_ = keys_->shape(2);
    const int trim_size = idx_ - max_size_ + 1;
    keys_ = trim_front(trim_size, *keys_, keys);
    values_ = trim_front(trim_size, *values_, values);
  }
  offset_ += keys.shape(2);
  idx_ = keys_->shape(2);
  return {*keys_, *values_};
}

std::pair<array, array> RotatingKVCache::update_in_place(const array& keys, const array& values) {
  const int prev = offset_, n = keys.shape(2);
  if (!keys_ || (prev >= keys_->shape(2) && keys_->shape(2) < max_size_)) {
    const int grow = std::min(step_, max_size_ - prev);
    array new_k = empty_like_tokens(keys, grow), new_v = empty_like_tokens(values, grow);
    if (keys_) {
      keys_ = concatenate({*keys_, new_k}, 2);
      values_ = concatenate({*values_, new_v}, 2);
    } else {
      keys_ = new_k;
      values_ = new_v;
    }
    idx_ = prev;
  }
  const int trim_size = keys_->shape(2) - max_size_;
  if (trim_size > 0) {  // after a prefill longer than the window
    keys_ = trim_front(trim_size, *keys_, std::nullopt);
    values_ = trim_front(trim_size, *values_, std::nullopt);
    idx_ = max_size_;
  }
  if (idx_ == max_size_) idx_ = keep_;  // rotate
  const array& k = *keys_;
  const array& v = *values_;
  keys_ = slice_update(k, keys, {0, 0, idx_, 0}, {k.shape(0), k.shape(1), idx_ + n, k.shape(3)});
  values_ = slice_update(v, values, {0, 0, idx_, 0}, {v.shape(0), v.shape(1), idx_ + n, v.shape(3)});
  offset_ += n;
  idx_ += n;
  return keys_and_values();
}

std::pair<array, array> RotatingKVCache::keys_and_values() const {
  if (!keys_) throw Error("[RotatingKVCache] the cache is empty");
  if (offset_ < keys_->shape(2)) return {tokens(*keys_, 0, offset_), tokens(*values_, 0, offset_)};
  return {*keys_, *values_};
}

int RotatingKVCache::trim(int n) {
  n = std::clamp(n, 0, offset_);
  offset_ -= n;
  idx_ -= n;
  return n;
}

}  // namespace kiln::nn
