// The PEM files of --tls_cert, --tls_key and --tls_client_ca, read and checked before the server
// starts: each must be a readable, non-empty regular file holding what its flag names, and the
// key must belong to the certificate. A misconfiguration stops the server with a message naming
// the flag and the file, instead of a listener that fails to start for no stated reason, or
// mutual TLS started with no usable CA.
#pragma once

#include <grpcpp/security/server_credentials.h>

#include <string>

#include "absl/status/statusor.h"

namespace matserve::server {

// `client_ca` may be empty (no client certificates asked for); `cert` and `key` may not.
absl::StatusOr<grpc::SslServerCredentialsOptions> load_tls_options(const std::string& cert,
                                                                   const std::string& key,
                                                                   const std::string& client_ca);

}  // namespace matserve::server
