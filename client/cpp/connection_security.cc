// Token and TLS files into ClientOptions (see connection_security.h).
#include "client/cpp/connection_security.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "grpcpp/security/credentials.h"

namespace matserve::client {

absl::Status check_security_files(const SecurityFiles& files) {
  if (files.tls_cert.empty() != files.tls_key.empty()) {
    return absl::InvalidArgumentError(
        "--tls-cert and --tls-key go together (the client certificate and its key)");
  }
  if ((!files.tls_cert.empty() || !files.tls_server_name.empty()) && files.tls_ca.empty()) {
    return absl::InvalidArgumentError(
        "--tls-cert/--tls-server-name need --tls-ca (the roots that sign the server)");
  }
  return absl::OkStatus();
}

absl::Status apply_security_files(const SecurityFiles& files, ClientOptions& options) {
  if (absl::Status s = check_security_files(files); !s.ok()) return s;
  if (!files.token_file.empty()) {
    absl::StatusOr<std::string> token = read_text_file("--token-file", files.token_file);
    if (!token.ok()) return token.status();
    options.bearer_token = first_token(*token);
    if (options.bearer_token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--token-file: ", files.token_file,
                       " holds no token (its first line that is not blank or a '#' comment)"));
    }
  } else if (const char* env = std::getenv("MATSERVE_TOKEN"); env != nullptr) {
    options.bearer_token = first_token(env);
  }
  if (!files.tls_ca.empty()) {
    grpc::SslCredentialsOptions ssl;
    for (auto [flag, path, pem] : {std::tuple{"--tls-ca", &files.tls_ca, &ssl.pem_root_certs},
                                   std::tuple{"--tls-cert", &files.tls_cert, &ssl.pem_cert_chain},
                                   std::tuple{"--tls-key", &files.tls_key, &ssl.pem_private_key}}) {
      if (path->empty()) continue;
      absl::StatusOr<std::string> text = read_text_file(flag, *path);
      if (!text.ok()) return text.status();
      *pem = *std::move(text);
    }
    options.credentials = grpc::SslCredentials(ssl);
    options.tls_server_name = files.tls_server_name;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> read_text_file(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(flag, ": cannot read ", path));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string first_token(const std::string& text) {
  for (absl::string_view line : absl::StrSplit(text, absl::ByAnyChar("\r\n"))) {
    line = absl::StripAsciiWhitespace(line);
    if (!line.empty() && line[0] != '#') return std::string(line);
  }
  return "";
}

}  // namespace matserve::client
