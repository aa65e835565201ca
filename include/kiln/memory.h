#pragma once
// Memory accounting of Kiln's allocator (all devices together).
#include <cstddef>

namespace kiln {

size_t get_active_memory();  // bytes held by live buffers
size_t get_peak_memory();    // high-water mark of active memory
void reset_peak_memory();
size_t get_cache_memory();   // bytes kept in the buffer cache for reuse
// Limit on active + cached memory; returns the previous limit. An
// allocation past it (after the cache is dropped) throws kiln::Error.
size_t set_memory_limit(size_t limit);
size_t get_memory_limit();
void clear_cache();
// Bytes the buffer cache may hold (MLX's set_cache_limit): past it, freed
// buffers go back to the system; 0 disables the cache. Defaults to the
// memory limit. Returns the previous cache limit.
size_t set_cache_limit(size_t limit);
// MLX's set_wired_limit: Metal residency on Apple GPUs. Kiln records the
// value and returns the previous one (default 0); it changes nothing here.
size_t set_wired_limit(size_t limit);

}  // namespace kiln
