// What a fuzz session expects of the server: the resident matrices its calls created (owner,
// shape, bytes when known), the handle substitution that lets an input name them, and the checks
// every reply and status must pass. A broken expectation aborts with the session's call log.
#pragma once

#include <grpcpp/support/status.h>

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "matserve/v1/matrix_service.pb.h"
#include "tests/fuzz/service_harness.h"

namespace matserve::fuzz {

struct Tracked {
  std::string handle;
  Caller owner = Caller::kAlice;
  bool live = true;
  v1::Matrix shape;             // rows, cols, dtype, layout; data = the contents when known
  bool contents_known = false;  // uploaded, and not transposed in place since
};

class Model {
 public:
  // Replaces a handle field of exactly one byte by the (byte % count)-th handle this session has
  // seen (released ones too); records in `named` what a non-empty field names (null: unknown).
  void substitute(std::string* field, std::vector<Tracked*>& named);
  // Every named handle is live and `caller`'s: a call may only succeed then.
  static bool usable(const std::vector<Tracked*>& named, Caller caller);
  Tracked* find(const std::string& handle);
  // A handle from an OK reply: 32 hex digits, never seen before. Returns its new entry.
  Tracked& add(const std::string& handle, Caller owner, const v1::Matrix& shape);
  // The live handles `owner` holds.
  std::vector<Tracked*> live_of(Caller owner);

  // Appends "<rpc>(caller)=CODE" to the log printed on failure.
  void log(const char* rpc, Caller caller, const grpc::Status& s);
  // Appends a remark to the log (and the trace).
  void note(const char* what);
  // A failed call must carry a proper code and a message: bad input is never UNKNOWN/INTERNAL.
  void check_status(const char* rpc, const grpc::Status& s);
  void expect(bool ok, const char* what);

 private:
  std::deque<Tracked> handles_;  // a deque: entries never move, `named` pointers stay valid
  std::string log_;
};

// Bytes per element of a valid dtype (0 for an invalid one).
std::int64_t element_bytes(v1::DataType t);
// rows * cols * element size of a valid shape.
std::int64_t matrix_bytes(const v1::Matrix& m);
// The shape fields of `m` (no data).
v1::Matrix shape_of(const v1::Matrix& m);
bool same_shape(const v1::Matrix& a, const v1::Matrix& b);

}  // namespace matserve::fuzz
