// Connection security for command-line tools: a bearer token read from a file (else from the
// MATSERVE_TOKEN environment variable) and TLS from PEM files, checked and applied to
// ClientOptions. matserve-cli and matserve-bench share the flags (--token-file, --tls-ca,
// --tls-cert, --tls-key, --tls-server-name) and these rules.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/cpp/client.h"

namespace matserve::client {

struct SecurityFiles {
  std::string token_file;       // first line that is not blank or a '#' comment = the token
  std::string tls_ca;           // PEM roots that sign the server; turns TLS on
  std::string tls_cert;         // client certificate (mutual TLS), with tls_key
  std::string tls_key;          // its private key
  std::string tls_server_name;  // name expected in the server's certificate
};

// INVALID_ARGUMENT naming the flags when the combination cannot work (a certificate without its
// key, or a client certificate or server name without TLS roots).
absl::Status check_security_files(const SecurityFiles& files);

// Reads the files into `options` (bearer_token, credentials, tls_server_name). Without a token
// file, MATSERVE_TOKEN (when set) gives the token. NOT_FOUND naming the flag for an unreadable
// file, INVALID_ARGUMENT for a token file without a token.
absl::Status apply_security_files(const SecurityFiles& files, ClientOptions& options);

// A file's whole text; NOT_FOUND naming `flag` when it cannot be read.
absl::StatusOr<std::string> read_text_file(const std::string& flag, const std::string& path);
// The first line of `text` that is not blank or a '#' comment, without surrounding whitespace:
// a token file read as the server reads its tokens file.
std::string first_token(const std::string& text);

}  // namespace matserve::client
