// Token sources: one format for the file and the environment variable (entries one per line or
// separated by ';', '#' comment lines, blank lines, a leading byte-order mark), and sources that
// fail closed: a configured source that cannot be read or holds no token is an error, never
// "authentication off"; names are unique. And authentication: each token's name and permissions.
#include "server/service/auth.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace matserve::server {
namespace {

constexpr char kAlice[] = "alice-token-0123456789";
constexpr char kBob[] = "bob-token-0123456789ab";

std::string temp_file(const std::string& text) {
  char path[] = "/tmp/matserve_auth_test_XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << text;
  return path;
}

TEST(AuthenticatorTest, SecretStyleLinesWithCommentsAndBlankLines) {
  const std::string text = std::string("# matserve tokens\n\n  # indented comment\n") + kAlice +
                           " alice\n\n" + kBob + " bob info,compute\n# trailing comment";
  absl::StatusOr<Authenticator> a = Authenticator::parse(text);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->size(), 2u);
}

TEST(AuthenticatorTest, SemicolonsAndLinesMixAndCrLfIsAccepted) {
  const std::string text = std::string(kAlice) + " alice; " + kBob + " bob\r\n";
  absl::StatusOr<Authenticator> a = Authenticator::parse(text);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->size(), 2u);
}

TEST(AuthenticatorTest, ACommentRunsToTheEndOfItsLineEvenWithSemicolons) {
  // Were the ';' split first, "rotate monthly" would become an entry.
  const std::string text = std::string("# tokens; rotate monthly\n") + kAlice + " alice";
  absl::StatusOr<Authenticator> a = Authenticator::parse(text);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->size(), 1u);
}

TEST(AuthenticatorTest, MalformedEntryNamesTheSourceAndLine) {
  absl::StatusOr<Authenticator> a =
      Authenticator::parse(std::string("# c\n") + kAlice + " alice\nshort bob\n", "tokens.txt");
  ASSERT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a.status().message(),
            "tokens.txt, line 3: expected '<token of 16+ characters> <name> "
            "[info,compute,resident,shm]'");
}

TEST(AuthenticatorTest, NoSourceMeansAuthenticationOff) {
  absl::StatusOr<Authenticator> a = Authenticator::from_sources("", nullptr);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_FALSE(a->enabled());
}

TEST(AuthenticatorTest, FileAndEnvironmentReadTheSameFormat) {
  const std::string text = std::string("# c\n") + kAlice + " alice\n" + kBob + " bob\n";
  const std::string path = temp_file(text);
  absl::StatusOr<Authenticator> from_file = Authenticator::from_sources(path, nullptr);
  absl::StatusOr<Authenticator> from_env = Authenticator::from_sources("", text.c_str());
  std::remove(path.c_str());
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  ASSERT_TRUE(from_env.ok()) << from_env.status();
  EXPECT_EQ(from_file->size(), 2u);
  EXPECT_EQ(from_env->size(), 2u);
}

TEST(AuthenticatorTest, AConfiguredSourceWithNoTokenFailsClosed) {
  for (const std::string text : {"", "\n\n", "# only a comment\n", "  ;  ; \n# x; y\n"}) {
    absl::StatusOr<Authenticator> env = Authenticator::from_sources("", text.c_str());
    EXPECT_EQ(env.status().code(), absl::StatusCode::kFailedPrecondition) << "'" << text << "'";
    EXPECT_NE(env.status().message().find("$MATSERVE_AUTH_TOKENS: holds no token"),
              std::string::npos)
        << env.status();
    const std::string path = temp_file(text);
    absl::StatusOr<Authenticator> file = Authenticator::from_sources(path, nullptr);
    std::remove(path.c_str());
    EXPECT_EQ(file.status().code(), absl::StatusCode::kFailedPrecondition) << "'" << text << "'";
    EXPECT_NE(file.status().message().find("holds no token"), std::string::npos) << file.status();
  }
}

TEST(AuthenticatorTest, AnUnreadableFileFailsClosed) {
  absl::StatusOr<Authenticator> a =
      Authenticator::from_sources("/nonexistent/matserve/tokens", nullptr);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(a.status().message(), "auth_tokens_file: cannot read /nonexistent/matserve/tokens");
}

TEST(AuthenticatorTest, BothSourcesAtOnceAreRefused) {
  const std::string env = std::string(kAlice) + " alice";
  absl::StatusOr<Authenticator> a = Authenticator::from_sources("/some/file", env.c_str());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(AuthenticatorTest, TwoTokensWithOneNameAreRefusedNamingTheFileAndLines) {
  const std::string path =
      temp_file(std::string("# tokens\n") + kAlice + " alice\n" + kBob + " alice info,compute\n");
  absl::StatusOr<Authenticator> a = Authenticator::from_sources(path, nullptr);
  std::remove(path.c_str());
  ASSERT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("auth_tokens_file " + path +
                                      ", line 3: the name 'alice' is given to another token "
                                      "already (line 2)"),
            std::string::npos)
      << a.status();
  // Also within one line of ';'-separated entries.
  EXPECT_EQ(Authenticator::parse(std::string(kAlice) + " x; " + kBob + " x").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(AuthenticatorTest, AByteOrderMarkIsNotPartOfTheFirstToken) {
  const std::string path =
      temp_file(std::string("\xEF\xBB\xBF") + kAlice + " alice\n" + kBob + " bob info\n");
  absl::StatusOr<Authenticator> a = Authenticator::from_sources(path, nullptr);
  std::remove(path.c_str());
  ASSERT_TRUE(a.ok()) << a.status();
  const std::string bearer = std::string("Bearer ") + kAlice;
  absl::StatusOr<std::string> who = a->authenticate(bearer, Permission::kCompute, "Multiply");
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ(*who, "alice");
}

TEST(AuthenticatorTest, EachTokenIsItsOwnNameWithItsOwnPermissions) {
  absl::StatusOr<Authenticator> a =
      Authenticator::parse(std::string(kAlice) + " alice\n" + kBob + " bob info,compute\n");
  ASSERT_TRUE(a.ok()) << a.status();
  const std::string alice = std::string("Bearer ") + kAlice, bob = std::string("Bearer ") + kBob;
  for (Permission p : {Permission::kInfo, Permission::kCompute, Permission::kResident,
                       Permission::kSharedMemory}) {
    absl::StatusOr<std::string> who = a->authenticate(alice, p, "Rpc");
    ASSERT_TRUE(who.ok()) << who.status();
    EXPECT_EQ(*who, "alice");  // all permissions when none are listed
  }
  for (Permission p : {Permission::kInfo, Permission::kCompute}) {
    absl::StatusOr<std::string> who = a->authenticate(bob, p, "Rpc");
    ASSERT_TRUE(who.ok()) << who.status();
    EXPECT_EQ(*who, "bob");
  }
  // The refusal names the permission the call needs, not only the token's.
  for (auto [p, name] : {std::pair{Permission::kResident, "resident"},
                         std::pair{Permission::kSharedMemory, "shm"}}) {
    absl::StatusOr<std::string> who = a->authenticate(bob, p, "Upload");
    EXPECT_EQ(who.status().code(), absl::StatusCode::kPermissionDenied);
    EXPECT_EQ(who.status().message(),
              absl::StrCat("token 'bob' may not call Upload: it needs permission '", name,
                           "' (its permissions: info,compute)"));
  }
  EXPECT_EQ(a->authenticate(std::nullopt, Permission::kInfo, "Rpc").status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(a->authenticate(std::string(kAlice), Permission::kInfo, "Rpc").status().code(),
            absl::StatusCode::kUnauthenticated);  // no "Bearer "
  EXPECT_EQ(a->authenticate("Bearer " + std::string(kAlice) + "x", Permission::kInfo, "Rpc")
                .status()
                .code(),
            absl::StatusCode::kUnauthenticated);
  // Authentication off: everyone is the anonymous owner, whatever they send.
  Authenticator off;
  absl::StatusOr<std::string> anyone = off.authenticate(std::nullopt, Permission::kResident, "R");
  ASSERT_TRUE(anyone.ok());
  EXPECT_EQ(*anyone, "");
}

}  // namespace
}  // namespace matserve::server
