// The server binary's global operator new and delete: blocks of message_memory::kMinBytes or more
// come from the pinned message heap while one is installed (the CUDA backend's), everything else
// and every block that does not fit from malloc. This is how a request's operands land in pinned
// memory as gRPC's protobuf parser writes them (a bytes field is a std::string, allocated here),
// and a reply's result buffer likewise: the device reads and writes them by DMA, with no copy
// through a staging ring. Linked into the server executable only (tests link it explicitly).
#include <cstdlib>
#include <new>

#include "server/runtime/message_memory.h"

namespace {

void* allocate_or_throw(std::size_t n) {
  if (void* p = matserve::server::message_memory::allocate(n)) return p;
  for (;;) {
    if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
    const std::new_handler handler = std::get_new_handler();
    if (handler == nullptr) throw std::bad_alloc();
    handler();
  }
}

void* allocate_or_null(std::size_t n) noexcept {
  try {
    return allocate_or_throw(n);
  } catch (...) {
    return nullptr;
  }
}

void deallocate(void* p) noexcept {
  if (p == nullptr || matserve::server::message_memory::release(p)) return;
  std::free(p);
}

}  // namespace

void* operator new(std::size_t n) {
  return allocate_or_throw(n);
}
void* operator new[](std::size_t n) {
  return allocate_or_throw(n);
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  return allocate_or_null(n);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  return allocate_or_null(n);
}
void operator delete(void* p) noexcept {
  deallocate(p);
}
void operator delete[](void* p) noexcept {
  deallocate(p);
}
void operator delete(void* p, std::size_t) noexcept {
  deallocate(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  deallocate(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  deallocate(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  deallocate(p);
}
