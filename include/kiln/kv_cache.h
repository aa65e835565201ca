#pragma once
// Key/value caches for autoregressive decoding, after mlx-lm's KVCache and
// RotatingKVCache (mlx_lm/models/cache.py), in kiln::nn.
//
// Keys and values are [B, n_kv_heads, S, head_dim] (S new tokens per call).
// The cache owns a buffer of capacity >= offset along axis 2 and writes the
// new tokens into it with slice_update: once the buffer has been computed,
// the update donates it to its output (written in place, no copy of the
// cache per token) as long as nothing else holds it - drop the views a step
// returned before evaluating the next step. The buffer grows by `step`
// tokens at a time (one copy per growth).
#include <optional>
#include <utility>

#include "kiln/array.h"

namespace kiln::nn {

class KVCache {
 public:
  explicit KVCache(int step = 256);

  // Appends keys/values (same B, heads and S) and returns views of every
  // cached token: [B, H, offset, D] each.
  std::pair<array, array> update_and_fetch(const array& keys, const array& values);
  // Views of the filled part (the cache must not be empty).
  std::pair<array, array> keys_and_values() const;

  int offset() const { return offset_; }
  int size() const { return offset_; }
  bool empty() const { return !keys_; }
  // Forgets the last n tokens (at most offset); returns how many.
  int trim(int n);
  // The whole buffers (capacity along axis 2), for inspection.
  const std::optional<array>& key_buffer() const { return keys_; }
  const std::optional<array>& value_buffer() const { return values_; }

 private:
  int step_;
  int offset_ = 0;
  std::optional<array> keys_, values_;
};

// A window of the last max_size tokens, the first `keep` tokens always
// kept (attention sinks). One token per call is written in place into a
// ring of max_size slots (positions keep..max_size-1 rotate); several
// tokens per call (prefill) are appended in temporal order, keeping at
// most max_size - 1 old tokens so that every new token sees max_size of
// context. Fetched views are in ring order for single-token updates, as in
// mlx-lm (attention over them is order-independent without a mask).
class RotatingKVCache {
 public:
  explicit RotatingKVCache(int max_size, int keep = 0, int step = 256);

  std::pair<array, array> update_and_fetch(const array& keys, const array& values);
  std::pair<array, array> keys_and_values() const;

  int offset() const { return offset_; }  // tokens seen in all
  int size() const { return offset_ < max_size_ ? offset_ : max_size_; }
  int max_size() const { return max_size_; }
  int keep() const { return keep_; }
  bool empty() const { return !keys_; }
  bool is_trimmable() const { return offset_ < max_size_; }
  int trim(int n);
  const std::optional<array>& key_buffer() const { return keys_; }

 private:
  std::pair<array, array> update_in_place(const array& keys, const array& values);
  std::pair<array, array> update_concat(const array& keys, const array& values);
  array temporal_order(const array& v) const;
  array trim_front(int trim_size, const array& v, const std::optional<array>& append) const;

  int max_size_, keep_, step_;
  int offset_ = 0;
  int idx_ = 0;  // next write position in the buffer
  std::optional<array> keys_, values_;
};

}  // namespace kiln::nn
