// TLS files: see tls_files.h. OpenSSL parses the PEM blocks (gRPC links it already).
#include "server/service/tls_files.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <fstream>
#include <memory>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace matserve::server {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Cert = std::unique_ptr<X509, X509Free>;
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;

// An encrypted key would make OpenSSL ask for a passphrase on the terminal: refuse instead.
int no_passphrase(char* /*buf*/, int /*size*/, int /*rwflag*/, void* /*u*/) {
  return -1;
}

absl::StatusOr<std::string> read_file(const std::string& flag, const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(flag, ": cannot read ", path, " (no such file)"));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is not a regular file"));
  }
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  if (!f || !(ss << f.rdbuf())) {
    if (st.st_size == 0) {
      return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is empty"));
    }
    return absl::PermissionDeniedError(absl::StrCat(flag, ": cannot read ", path));
  }
  return ss.str();
}

Bio memory_bio(const std::string& pem) {
  return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// The first certificate of a PEM file (the server's own, or the first CA of a bundle).
absl::StatusOr<Cert> first_certificate(const std::string& flag, const std::string& path,
                                       const std::string& pem) {
  Bio bio = memory_bio(pem);
  Cert first(PEM_read_bio_X509(bio.get(), nullptr, no_passphrase, nullptr));
  ERR_clear_error();
  if (first == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": no PEM certificate in ", path,
                                                   " (expected -----BEGIN CERTIFICATE-----)"));
  }
  return first;
}

}  // namespace

absl::StatusOr<grpc::SslServerCredentialsOptions> load_tls_options(const std::string& cert,
                                                                   const std::string& key,
                                                                   const std::string& client_ca) {
  absl::StatusOr<std::string> cert_pem = read_file("tls_cert", cert);
  if (!cert_pem.ok()) return cert_pem.status();
  absl::StatusOr<std::string> key_pem = read_file("tls_key", key);
  if (!key_pem.ok()) return key_pem.status();
  absl::StatusOr<Cert> leaf = first_certificate("tls_cert", cert, *cert_pem);
  if (!leaf.ok()) return leaf.status();
  Bio key_bio = memory_bio(*key_pem);
  Key private_key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, no_passphrase, nullptr));
  ERR_clear_error();
  if (private_key == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("tls_key: no unencrypted PEM private key in ", key,
                     " (expected -----BEGIN PRIVATE KEY----- or an RSA/EC equivalent)"));
  }
  if (X509_check_private_key(leaf->get(), private_key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat("tls_key: the key in ", key,
                                                   " does not belong to the certificate in ", cert,
                                                   " (--tls_cert)"));
  }
  grpc::SslServerCredentialsOptions options;
  options.pem_key_cert_pairs.push_back({*key_pem, *cert_pem});
  if (!client_ca.empty()) {
    absl::StatusOr<std::string> ca_pem = read_file("tls_client_ca", client_ca);
    if (!ca_pem.ok()) return ca_pem.status();
    if (absl::StatusOr<Cert> ca = first_certificate("tls_client_ca", client_ca, *ca_pem);
        !ca.ok()) {
      return ca.status();
    }
    options.pem_root_certs = *ca_pem;
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return options;
}

}  // namespace matserve::server
