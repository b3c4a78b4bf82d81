// Bearer-token authentication: see auth.h.
#include "server/service/auth.h"

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "server/runtime/quote.h"

namespace matserve::server {
namespace {

constexpr unsigned kAll = 15;

std::string permission_names(unsigned p) {
  std::vector<std::string> names;
  if (p & static_cast<unsigned>(Permission::kInfo)) names.push_back("info");
  if (p & static_cast<unsigned>(Permission::kCompute)) names.push_back("compute");
  if (p & static_cast<unsigned>(Permission::kResident)) names.push_back("resident");
  if (p & static_cast<unsigned>(Permission::kSharedMemory)) names.push_back("shm");
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ",") + n;
  return out.empty() ? "none" : out;
}

}  // namespace

absl::StatusOr<Authenticator> Authenticator::parse(const std::string& text,
                                                   const std::string& source) {
  Authenticator a;
  absl::flat_hash_map<std::string, int> lines_by_name;  // names must be unique: see auth.h
  absl::string_view body = text;
  absl::ConsumePrefix(&body, "\xEF\xBB\xBF");  // a byte-order mark some editors write
  int number = 0;
  for (absl::string_view line : absl::StrSplit(body, '\n')) {
    ++number;
    if (absl::StartsWith(absl::StripLeadingAsciiWhitespace(line), "#")) continue;
    for (absl::string_view entry : absl::StrSplit(line, ';')) {
      entry = absl::StripAsciiWhitespace(entry);
      if (entry.empty()) continue;
      std::vector<std::string> fields =
          absl::StrSplit(entry, absl::ByAnyChar(" \t"), absl::SkipEmpty());
      if (fields.size() < 2 || fields.size() > 3 || fields[0].size() < 16) {
        return absl::InvalidArgumentError(
            absl::StrCat(source, ", line ", number,
                         ": expected '<token of 16+ characters> <name> "
                         "[info,compute,resident,shm]'"));
      }
      Token t{fields[1], fields.size() == 3 ? 0u : kAll};
      if (fields.size() == 3) {
        for (absl::string_view p : absl::StrSplit(fields[2], ',')) {
          if (p == "info")
            t.permissions |= static_cast<unsigned>(Permission::kInfo);
          else if (p == "compute")
            t.permissions |= static_cast<unsigned>(Permission::kCompute);
          else if (p == "resident")
            t.permissions |= static_cast<unsigned>(Permission::kResident);
          else if (p == "shm")
            t.permissions |= static_cast<unsigned>(Permission::kSharedMemory);
          else {
            return absl::InvalidArgumentError(absl::StrCat(
                source, ", line ", number, ": unknown permission ", quote(std::string(p))));
          }
        }
      }
      if (!a.tokens_.emplace(fields[0], t).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(source, ", line ", number, ": the same token appears twice"));
      }
      if (auto [it, fresh] = lines_by_name.emplace(t.name, number); !fresh) {
        return absl::InvalidArgumentError(absl::StrCat(
            source, ", line ", number, ": the name ", quote(t.name),
            " is given to another token already (line ", it->second,
            "); each token needs a name of its own, since the name owns the token's resident "
            "matrices, shared-memory regions and quota"));
      }
    }
  }
  return a;
}

absl::StatusOr<Authenticator> Authenticator::from_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) return absl::NotFoundError(absl::StrCat("auth_tokens_file: cannot read ", path));
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return absl::DataLossError(absl::StrCat("auth_tokens_file: cannot read ", path));
  return parse(ss.str(), absl::StrCat("auth_tokens_file ", path));
}

absl::StatusOr<Authenticator> Authenticator::from_sources(const std::string& file,
                                                          const char* env) {
  if (!file.empty() && env != nullptr) {
    return absl::InvalidArgumentError(
        "auth tokens: both --auth_tokens_file and $MATSERVE_AUTH_TOKENS are set; set one");
  }
  if (file.empty() && env == nullptr) return Authenticator();
  const std::string source =
      !file.empty() ? absl::StrCat("auth_tokens_file ", file) : "$MATSERVE_AUTH_TOKENS";
  absl::StatusOr<Authenticator> a = !file.empty() ? from_file(file) : parse(env, source);
  if (a.ok() && !a->enabled()) {
    return absl::FailedPreconditionError(
        absl::StrCat(source,
                     ": holds no token (only blank or comment lines); refusing to serve without "
                     "authentication (remove the setting to serve without tokens)"));
  }
  return a;
}

absl::StatusOr<std::string> Authenticator::authenticate(const grpc::ServerContext& context,
                                                        Permission need, const char* rpc) const {
  if (!enabled()) return std::string();
  const auto& md = context.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) return authenticate(std::nullopt, need, rpc);
  return authenticate(std::string_view(it->second.data(), it->second.size()), need, rpc);
}

absl::StatusOr<std::string> Authenticator::authenticate(
    std::optional<std::string_view> authorization, Permission need, const char* rpc) const {
  if (!enabled()) return std::string();
  if (!authorization.has_value()) {
    return absl::UnauthenticatedError(
        "authorization: missing (send metadata 'authorization: Bearer <token>')");
  }
  absl::string_view value(authorization->data(), authorization->size());
  if (!absl::ConsumePrefix(&value, "Bearer ")) {
    return absl::UnauthenticatedError("authorization: expected 'Bearer <token>'");
  }
  auto token = tokens_.find(std::string(value));
  if (token == tokens_.end()) return absl::UnauthenticatedError("authorization: unknown token");
  if ((token->second.permissions & static_cast<unsigned>(need)) == 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("token '", token->second.name, "' may not call ", rpc,
                     ": it needs permission '", permission_names(static_cast<unsigned>(need)),
                     "' (its permissions: ", permission_names(token->second.permissions), ")"));
  }
  return token->second.name;
}

}  // namespace matserve::server
