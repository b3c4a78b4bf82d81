// Shared memory in a fuzz session: a few small POSIX shared-memory objects of this process (made
// on first use, unlinked at the end of the input), regions registered on the in-process server
// with the possession handshake, RegisterSharedMemory / UnregisterSharedMemory /
// ListSharedMemory checked against what the session registered, objects truncated and grown
// behind the server's back, and region names an input can refer to by one byte.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "matserve/v1/matrix_service.pb.h"
#include "tests/fuzz/service_harness.h"
#include "tests/fuzz/service_model.h"

namespace matserve::fuzz {

class ShmSession {
 public:
  // At most kObjects objects of kObjectBytes bytes each, in /dev/shm.
  static constexpr int kObjects = 3;
  static constexpr std::int64_t kObjectBytes = 64 << 10;

  ShmSession(FuzzServer& srv, Model& model) : srv_(srv), model_(model) {}
  ~ShmSession();
  ShmSession(const ShmSession&) = delete;
  ShmSession& operator=(const ShmSession&) = delete;

  // Payload: a RegisterSharedMemoryRequest. A key of one byte names the session's
  // (byte % kObjects)-th object; for those the nonce the server asks for is written and the call
  // made again (other keys are sent as they are, never written to).
  void register_region(Caller c, std::string_view payload);
  // Payload: an UnregisterSharedMemoryRequest (a name of one byte: a name seen this session).
  void unregister(Caller c, std::string_view payload);
  void list(Caller c);
  // Payload: [object][size lo][size hi]: the object's new size in 256-byte units (at most
  // kObjectBytes), set with ftruncate behind the server's back.
  void resize(std::string_view payload);

  // A SharedMemoryRef's region of one byte: a name seen this session. Records the region named
  // (empty refs and unknown names too) for usable().
  void substitute(v1::SharedMemoryRef* ref, std::vector<std::string>& named);
  // Every name in `named` is one of `c`'s registered regions: a call may only succeed then.
  bool usable(const std::vector<std::string>& named, Caller c) const;

  // Unregisters everything; the server must then list no region for anyone.
  void finish();

 private:
  struct Region {
    Caller owner;
    std::string name;
  };
  int object_fd(int i);  // creates the objects on first use
  bool registered(Caller c, const std::string& name) const;
  void check_listing(Caller c, const v1::ListSharedMemoryReply& reply);

  FuzzServer& srv_;
  Model& model_;
  std::vector<int> fds_;
  std::vector<std::string> keys_;
  std::vector<Region> regions_;     // registered now
  std::vector<std::string> names_;  // every name registered this session, for substitution
};

}  // namespace matserve::fuzz
