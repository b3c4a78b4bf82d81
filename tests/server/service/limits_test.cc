// The start-up checks of the request limits: each flag out of its range is INVALID_ARGUMENT
// naming the flag.
#include "server/service/limits.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace matserve::server {
namespace {

void expect_error(const absl::Status& s, absl::StatusCode code, const std::string& fragment) {
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_NE(std::string(s.message()).find(fragment), std::string::npos)
      << "message: " << s.message() << "\nexpected to contain: " << fragment;
}

TEST(CheckLimits, RefusesLimitsTheKernelsCannotHonour) {
  EXPECT_TRUE(check_limits(ServiceLimits{}).ok());
  ServiceLimits l;
  l.max_dimension = std::int64_t{1} << 31;
  expect_error(check_limits(l), absl::StatusCode::kInvalidArgument,
               "max_dimension: must be in [1, 2147483647]");
  l.max_dimension = 0;
  expect_error(check_limits(l), absl::StatusCode::kInvalidArgument, "max_dimension");
  l = ServiceLimits{};
  l.max_matrix_bytes = 0;
  expect_error(check_limits(l), absl::StatusCode::kInvalidArgument, "max_matrix_bytes");
  l = ServiceLimits{};
  l.max_verify_flops = -1;
  expect_error(check_limits(l), absl::StatusCode::kInvalidArgument, "max_verify_flops");
  l = ServiceLimits{};
  l.max_verify_bytes = -1;
  expect_error(check_limits(l), absl::StatusCode::kInvalidArgument, "max_verify_bytes");
  l = ServiceLimits{};
  l.max_resident_bytes_per_owner = -1;
  expect_error(check_limits(l), absl::StatusCode::kInvalidArgument, "max_resident_bytes_per_owner");
}

TEST(CheckLimits, MessageSizeMustLeaveRoomForTheReplyFieldsAndFitGrpc) {
  ServiceLimits l;
  l.max_message_bytes = 1023;
  expect_error(check_limits(l), absl::StatusCode::kInvalidArgument,
               "max_message_bytes: must be in [1024, 2147483647]");
  l.max_message_bytes = std::int64_t{1} << 31;
  expect_error(check_limits(l), absl::StatusCode::kInvalidArgument,
               "max_message_bytes: must be in [1024, 2147483647]");
  l.max_message_bytes = 1024;
  EXPECT_TRUE(check_limits(l).ok());
}

}  // namespace
}  // namespace matserve::server
