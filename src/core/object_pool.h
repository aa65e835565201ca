#pragma once
// Pooled shared objects for the graph's small, short-lived heap objects: a
// node's descriptor (ArrayDesc), its primitive and its Buffer. A chain of
// small ops allocates several of each per op and frees them in a burst when
// the graph is dropped, often on another thread (a stream worker); the C
// library's allocator served that pattern with chunk coalescing and
// consolidation, 40% of the host time of a 1,000-op eager step on the CPU.
// Each type gets a free list of blocks (the shared_ptr control block and
// the object in one), reused in LIFO order and shared by all threads; at
// most kMaxPooled blocks are kept per type, the rest go back to the heap.
// Under AddressSanitizer the pool is bypassed, so that a use after free of
// a node is still reported.
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>
#include <thread>

namespace kiln::detail {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kPoolObjects = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kPoolObjects = false;
#else
inline constexpr bool kPoolObjects = true;
#endif
#else
inline constexpr bool kPoolObjects = true;
#endif

// KILN_OBJECT_POOL=0 turns the pools off (the A/B switch), read once.
bool object_pool_enabled();

class BlockPool {
 public:
  static constexpr size_t kMaxPooled = 16384;

  void* take(size_t bytes) {
    {
      Lock lock(busy_);
      if (head_) {
        Free* f = head_;
        head_ = f->next;
        --count_;
        return f;
      }
    }
    return ::operator new(bytes);
  }
  void give(void* p) {
    {
      Lock lock(busy_);
      if (count_ < kMaxPooled) {
        head_ = new (p) Free{head_};
        ++count_;
        return;
      }
    }
    ::operator delete(p);
  }

 private:
  struct Free {
    Free* next;
  };
  // A spinlock: the sections are three pointer moves, and an uncontended
  // mutex's lock and unlock cost more than the rest of take or give.
  class Lock {
   public:
    explicit Lock(std::atomic_flag& f) : f_(f) {
      while (f_.test_and_set(std::memory_order_acquire)) {
        while (f_.test(std::memory_order_relaxed)) std::this_thread::yield();
      }
    }
    ~Lock() { f_.clear(std::memory_order_release); }

   private:
    std::atomic_flag& f_;
  };
  std::atomic_flag busy_;
  Free* head_ = nullptr;
  size_t count_ = 0;
};

// One pool per block type; never destroyed (objects may die after main).
template <typename T>
BlockPool& pool_for() {
  static BlockPool* pool = new BlockPool();
  return *pool;
}

template <typename T>
struct PoolAllocator {
  using value_type = T;
  PoolAllocator() = default;
  template <typename U>
  PoolAllocator(const PoolAllocator<U>&) {}
  T* allocate(size_t n) {
    static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__);
    if (!kPoolObjects || n != 1 || !object_pool_enabled()) return static_cast<T*>(::operator new(n * sizeof(T)));
    return static_cast<T*>(pool_for<T>().take(sizeof(T) < sizeof(void*) ? sizeof(void*) : sizeof(T)));
  }
  void deallocate(T* p, size_t n) {
    if (!kPoolObjects || n != 1 || !object_pool_enabled()) return ::operator delete(p);
    pool_for<T>().give(p);
  }
  template <typename U>
  bool operator==(const PoolAllocator<U>&) const {
    return true;
  }
};

// std::make_shared through the pool.
template <typename T, typename... Args>
std::shared_ptr<T> make_pooled(Args&&... args) {
  return std::allocate_shared<T>(PoolAllocator<T>{}, std::forward<Args>(args)...);
}

}  // namespace kiln::detail
