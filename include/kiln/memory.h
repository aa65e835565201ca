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

}  // namespace kiln
