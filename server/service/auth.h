// Bearer-token authentication and per-RPC permissions. Tokens come from a file (one
// "<token> <name> [permissions]" per line) or an environment variable with the same lines
// separated by ';'. With no tokens configured every caller is the anonymous owner "". The
// token's name becomes the owner of the resident matrices it creates: no other token sees them.
#pragma once

#include <grpcpp/server_context.h>

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace matserve::server {

// What an RPC needs; a token lists the ones it holds (all of them when it lists none).
enum class Permission : unsigned { kInfo = 1, kCompute = 2, kResident = 4 };

class Authenticator {
 public:
  Authenticator() = default;  // authentication off
  // Parses the lines described above; INVALID_ARGUMENT naming the line when one is malformed.
  static absl::StatusOr<Authenticator> parse(const std::string& text, char line_separator = '\n');
  static absl::StatusOr<Authenticator> from_file(const std::string& path);

  bool enabled() const { return !tokens_.empty(); }
  std::size_t size() const { return tokens_.size(); }

  // The caller's owner name, from metadata "authorization: Bearer <token>".
  // UNAUTHENTICATED without a known token; PERMISSION_DENIED when the token lacks `need`.
  absl::StatusOr<std::string> authenticate(const grpc::ServerContext& context, Permission need,
                                           const char* rpc) const;

 private:
  struct Token {
    std::string name;
    unsigned permissions = 0;
  };
  absl::flat_hash_map<std::string, Token> tokens_;
};

}  // namespace matserve::server
