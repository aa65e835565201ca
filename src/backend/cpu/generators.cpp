// Arange and the random bit generator.
#include "backend/cpu/cast.h"
#include "backend/common/philox.h"
#include "backend/cpu/threading.h"
#include "core/array_desc.h"
#include "core/primitives.h"

namespace kiln {

void Arange::eval_cpu(const std::vector<array>&, array& out) {
  detail::allocate(out, "arange");
  cpu::dispatch_all(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* dst = reinterpret_cast<T*>(detail::data_ptr(out));
    double start = start_, step = step_;
    cpu::parallel_for(static_cast<int64_t>(out.size()), 1 << 15, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) dst[i] = cpu::convert<T>(start + static_cast<double>(i) * step);
    });
  });
}

// Element i takes word i % 4 of block i / 4 (counter = block index).
void RandomBits::eval_cpu(const std::vector<array>& inputs, array& out) {
  const array& key = inputs[0];
  detail::allocate(out, "random");
  const auto& kd = *key.desc();
  const uint32_t* kp = reinterpret_cast<const uint32_t*>(detail::data_ptr(key));
  uint32_t k0 = kp[0], k1 = kp[kd.strides.empty() ? 1 : kd.strides[0]];
  uint32_t* dst = reinterpret_cast<uint32_t*>(detail::data_ptr(out));
  int64_t n = static_cast<int64_t>(out.size());
  int64_t blocks = (n + 3) / 4;
  cpu::parallel_for(blocks, 1 << 12, [&](int64_t b, int64_t e) {
    for (int64_t blk = b; blk < e; ++blk) {
      philox::Block r = philox::generate(k0, k1, static_cast<uint32_t>(blk), static_cast<uint32_t>(blk >> 32));
      for (int j = 0; j < 4 && blk * 4 + j < n; ++j) dst[blk * 4 + j] = r.v[j];
    }
  });
}

}  // namespace kiln
