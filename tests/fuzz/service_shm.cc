// Shared memory in a fuzz session: see service_shm.h.
#include "tests/fuzz/service_shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "absl/strings/str_cat.h"
#include "server/runtime/shm_nonces.h"

namespace matserve::fuzz {
namespace {

using Service = server::MatrixServiceImpl;
const v1::ListSharedMemoryRequest kList;

bool may_use_shm(Caller c) {
  return c == Caller::kAlice || c == Caller::kBob;
}

template <typename Message>
bool parse(Message& m, std::string_view bytes) {
  return m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
}

}  // namespace

ShmSession::~ShmSession() {
  for (std::size_t i = 0; i < fds_.size(); ++i) {
    ::close(fds_[i]);
    ::shm_unlink(keys_[i].c_str());
  }
}

int ShmSession::object_fd(int i) {
  while (static_cast<int>(fds_.size()) < kObjects) {
    const std::string key = absl::StrCat("/msfuzz-", ::getpid(), "-", fds_.size());
    const int fd = ::shm_open(key.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || ::ftruncate(fd, kObjectBytes) != 0) {
      std::perror("service fuzz: shm_open");
      std::abort();
    }
    // Small finite floats (and doubles) everywhere: 0x3f3f3f3f.
    const std::string fill(static_cast<std::size_t>(kObjectBytes), '\x3f');
    if (::pwrite(fd, fill.data(), fill.size(), 0) != static_cast<ssize_t>(fill.size())) {
      std::abort();
    }
    fds_.push_back(fd);
    keys_.push_back(key);
  }
  return fds_[static_cast<std::size_t>(i)];
}

bool ShmSession::registered(Caller c, const std::string& name) const {
  return std::any_of(regions_.begin(), regions_.end(),
                     [&](const Region& r) { return r.owner == c && r.name == name; });
}

void ShmSession::register_region(Caller c, std::string_view payload) {
  v1::RegisterSharedMemoryRequest req;
  if (!parse(req, payload)) return;
  int object = -1;
  if (req.key().size() == 1) {
    object = static_cast<unsigned char>(req.key()[0]) % kObjects;
    object_fd(object);
    req.set_key(keys_[static_cast<std::size_t>(object)]);
  }
  v1::RegisterSharedMemoryReply reply;
  std::multimap<std::string, std::string> trailers;
  grpc::Status s = srv_.unary(&Service::RegisterSharedMemory, c, req, &reply, &trailers);
  model_.log("RegisterSharedMemory", c, s);
  model_.check_status("RegisterSharedMemory", s);
  const auto nonce = trailers.find(server::kShmNonceMetadataKey);
  if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION && nonce != trailers.end() &&
      object >= 0) {
    // The possession handshake on one of the session's objects: the nonce at the range's start.
    model_.expect(nonce->second.size() == server::ShmNonces::kBytes, "a nonce has 32 bytes");
    const int fd = fds_[static_cast<std::size_t>(object)];
    std::string saved(server::ShmNonces::kBytes, '\0');
    const ssize_t got = ::pread(fd, saved.data(), saved.size(), req.offset());
    if (got == static_cast<ssize_t>(saved.size()) &&
        ::pwrite(fd, nonce->second.data(), nonce->second.size(), req.offset()) == got) {
      reply.Clear();
      trailers.clear();
      s = srv_.unary(&Service::RegisterSharedMemory, c, req, &reply, &trailers);
      model_.log("RegisterSharedMemory(nonce)", c, s);
      model_.check_status("RegisterSharedMemory", s);
      if (::pwrite(fd, saved.data(), saved.size(), req.offset()) != got) std::abort();
    }
  }
  if (s.error_code() == grpc::StatusCode::ALREADY_EXISTS) {
    model_.expect(registered(c, req.name()), "ALREADY_EXISTS only for a name the caller has");
  }
  if (!s.ok()) return;
  model_.expect(may_use_shm(c), "RegisterSharedMemory checks the shm permission");
  model_.expect(object >= 0, "only the session's own objects register (possession)");
  model_.expect(!registered(c, req.name()), "a region name is registered once per caller");
  struct stat st = {};
  if (::fstat(fds_[static_cast<std::size_t>(object)], &st) != 0) std::abort();
  model_.expect(
      req.offset() >= 0 && req.byte_size() >= 32 && req.byte_size() <= st.st_size - req.offset(),
      "a registered range lies inside the object and holds a nonce");
  model_.expect(reply.region().name() == req.name() && reply.region().key() == req.key() &&
                    reply.region().offset() == req.offset() &&
                    reply.region().byte_size() == req.byte_size(),
                "RegisterSharedMemory's reply describes the region");
  regions_.push_back({c, req.name()});
  if (std::find(names_.begin(), names_.end(), req.name()) == names_.end()) {
    names_.push_back(req.name());
  }
}

void ShmSession::unregister(Caller c, std::string_view payload) {
  v1::UnregisterSharedMemoryRequest req;
  if (!parse(req, payload)) return;
  if (req.name().size() == 1 && !names_.empty()) {
    req.set_name(names_[static_cast<unsigned char>(req.name()[0]) % names_.size()]);
  }
  v1::UnregisterSharedMemoryReply reply;
  const grpc::Status s = srv_.unary(&Service::UnregisterSharedMemory, c, req, &reply);
  model_.log("UnregisterSharedMemory", c, s);
  model_.check_status("UnregisterSharedMemory", s);
  const bool known = req.name().empty() || registered(c, req.name());
  model_.expect(s.ok() == (may_use_shm(c) && known),
                "UnregisterSharedMemory succeeds exactly on the caller's regions");
  if (!s.ok()) return;
  const auto before = regions_.size();
  std::erase_if(regions_, [&](const Region& r) {
    return r.owner == c && (req.name().empty() || r.name == req.name());
  });
  model_.expect(reply.unregistered() == static_cast<int>(before - regions_.size()),
                "UnregisterSharedMemory counts what it removed");
}

void ShmSession::check_listing(Caller c, const v1::ListSharedMemoryReply& reply) {
  std::vector<std::string> want;
  for (const Region& r : regions_) {
    if (r.owner == c) want.push_back(r.name);
  }
  std::vector<std::string> got;
  for (const v1::SharedMemoryRegion& r : reply.regions()) got.push_back(r.name());
  std::sort(want.begin(), want.end());
  std::sort(got.begin(), got.end());
  model_.expect(got == want, "ListSharedMemory lists exactly the caller's regions");
}

void ShmSession::list(Caller c) {
  v1::ListSharedMemoryReply reply;
  const grpc::Status s = srv_.unary(&Service::ListSharedMemory, c, kList, &reply);
  model_.log("ListSharedMemory", c, s);
  model_.check_status("ListSharedMemory", s);
  model_.expect(s.ok() == may_use_shm(c), "ListSharedMemory answers callers with shm");
  if (s.ok()) check_listing(c, reply);
}

void ShmSession::resize(std::string_view payload) {
  if (payload.size() < 3) return;
  const auto* p = reinterpret_cast<const unsigned char*>(payload.data());
  const int object = p[0] % kObjects;
  const std::int64_t size = std::min<std::int64_t>((p[1] | (p[2] << 8)) * 256, kObjectBytes);
  if (::ftruncate(object_fd(object), size) != 0) std::abort();
  model_.note("resize");
}

void ShmSession::substitute(v1::SharedMemoryRef* ref, std::vector<std::string>& named) {
  if (ref->region().size() == 1 && !names_.empty()) {
    ref->set_region(names_[static_cast<unsigned char>(ref->region()[0]) % names_.size()]);
  }
  named.push_back(ref->region());
}

bool ShmSession::usable(const std::vector<std::string>& named, Caller c) const {
  return std::all_of(named.begin(), named.end(),
                     [&](const std::string& n) { return registered(c, n); });
}

void ShmSession::finish() {
  for (Caller c : {Caller::kAlice, Caller::kBob}) {
    v1::UnregisterSharedMemoryReply reply;
    const grpc::Status s = srv_.unary(&Service::UnregisterSharedMemory, c,
                                      v1::UnregisterSharedMemoryRequest(), &reply);
    model_.log("UnregisterSharedMemory", c, s);
    model_.expect(s.ok(), "the final UnregisterSharedMemory succeeds");
    std::erase_if(regions_, [&](const Region& r) { return r.owner == c; });
    v1::ListSharedMemoryReply listed;
    const grpc::Status ls = srv_.unary(&Service::ListSharedMemory, c, kList, &listed);
    model_.expect(ls.ok() && listed.regions_size() == 0,
                  "no region left after the final unregister");
  }
}

}  // namespace matserve::fuzz
