// absl::Status -> grpc::Status: the canonical codes are the same numbers, so the mapping is 1:1
// and the message travels unchanged.
#pragma once

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"

namespace matserve::server {

inline grpc::Status to_grpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

}  // namespace matserve::server
