// Bearer-token authentication and per-RPC permissions. Tokens come from a file or an environment
// variable in one format: entries "<token> <name> [permissions]", one per line or separated by
// ';' (a Kubernetes Secret holds lines, a shell variable is easier with ';'); a line whose first
// non-blank character is '#' is a comment, and blank lines and entries are skipped, alike in
// both. A configured source that yields no token is an error: the server refuses to start rather
// than serve without authentication. With no source configured every caller is the anonymous
// owner "". The token's name becomes the owner of the resident matrices, shared-memory regions
// and quota it uses: no other token sees them. Names are therefore unique: two tokens with one
// name are refused at start. A UTF-8 byte-order mark at the start of the text is skipped.
#pragma once

#include <grpcpp/server_context.h>

#include <optional>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace matserve::server {

// What an RPC needs; a token lists the ones it holds (all of them when it lists none).
// kSharedMemory ("shm"): register shared-memory regions (RegisterSharedMemory and its kin).
enum class Permission : unsigned { kInfo = 1, kCompute = 2, kResident = 4, kSharedMemory = 8 };

class Authenticator {
 public:
  Authenticator() = default;  // authentication off
  // Parses the entries described above; INVALID_ARGUMENT naming `source` and the line when one is
  // malformed. Text with no entry gives an Authenticator with authentication off.
  static absl::StatusOr<Authenticator> parse(const std::string& text,
                                             const std::string& source = "auth tokens");
  static absl::StatusOr<Authenticator> from_file(const std::string& path);

  // The server's sources: the --auth_tokens_file flag (empty: none) and $MATSERVE_AUTH_TOKENS
  // (nullptr: unset). Neither: authentication off. One of them: its tokens, and an error
  // (naming the source) when it cannot be read or holds no token. Both: an error.
  static absl::StatusOr<Authenticator> from_sources(const std::string& file, const char* env);

  bool enabled() const { return !tokens_.empty(); }
  std::size_t size() const { return tokens_.size(); }

  // The caller's owner name, from metadata "authorization: Bearer <token>".
  // UNAUTHENTICATED without a known token; PERMISSION_DENIED when the token lacks `need`.
  absl::StatusOr<std::string> authenticate(const grpc::ServerContext& context, Permission need,
                                           const char* rpc) const;
  // The same from the metadata's value (nullopt: no "authorization" entry).
  absl::StatusOr<std::string> authenticate(std::optional<std::string_view> authorization,
                                           Permission need, const char* rpc) const;

 private:
  struct Token {
    std::string name;
    unsigned permissions = 0;
  };
  absl::flat_hash_map<std::string, Token> tokens_;
};

}  // namespace matserve::server
