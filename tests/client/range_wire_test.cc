// range_wire: the hand-written WriteRangeRequest parses as protobuf's own, with its data sent from
// the caller's memory; ReadRangeReply bytes split over slices at any place land in the caller's
// buffer; wrong sizes and malformed messages are DATA_LOSS, not garbage.
#include "client/cpp/range_wire.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "grpcpp/support/slice.h"
#include "matserve/v1/matrix_service.pb.h"

namespace matserve::client {
namespace {

std::string flatten(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(b.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices)
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// `bytes` as a ByteBuffer of slices cut at `cuts` (increasing offsets).
grpc::ByteBuffer in_slices(const std::string& bytes, const std::vector<std::size_t>& cuts) {
  std::vector<grpc::Slice> slices;
  std::size_t from = 0;
  for (std::size_t to : cuts) {
    slices.emplace_back(bytes.data() + from, to - from);
    from = to;
  }
  slices.emplace_back(bytes.data() + from, bytes.size() - from);
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string pattern(std::size_t n) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + 7) & 0xff);
  return s;
}

TEST(RangeWire, AWriteRangeRequestParsesAsProtobufsOwnAndPointsAtTheCallersBytes) {
  const std::string data = pattern(300000);  // a length that takes a 3-byte varint
  for (const std::int64_t offset : {std::int64_t{0}, std::int64_t{1}, std::int64_t{1} << 40}) {
    const grpc::ByteBuffer b = write_range_request("0123abcd", offset, data);
    v1::WriteRangeRequest parsed;
    ASSERT_TRUE(parsed.ParseFromString(flatten(b))) << offset;
    EXPECT_EQ(parsed.handle(), "0123abcd");
    EXPECT_EQ(parsed.offset(), offset);
    EXPECT_EQ(parsed.data(), data);
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(b.Dump(&slices).ok());
    ASSERT_EQ(slices.size(), 2u);
    EXPECT_EQ(reinterpret_cast<const char*>(slices[1].begin()), data.data());  // not a copy
  }
  v1::WriteRangeRequest empty;
  ASSERT_TRUE(empty.ParseFromString(flatten(write_range_request("h", 5, ""))));
  EXPECT_EQ(empty.offset(), 5);
  EXPECT_TRUE(empty.data().empty());
}

TEST(RangeWire, AReadRangeReplySplitAnywhereLandsInTheBuffer) {
  v1::ReadRangeReply reply;
  reply.set_data(pattern(1000));
  const std::string wire = reply.SerializeAsString();
  for (const std::vector<std::size_t>& cuts :
       std::vector<std::vector<std::size_t>>{{}, {1}, {2}, {3}, {1, 2, 3}, {500, 501}, {1002}}) {
    std::string out(1000, 'x');
    EXPECT_TRUE(read_range_reply_into(in_slices(wire, cuts), {out.data(), out.size()}).ok());
    EXPECT_EQ(out, reply.data());
  }
}

TEST(RangeWire, WrongSizesAndMalformedRepliesAreDataLoss) {
  v1::ReadRangeReply reply;
  reply.set_data(pattern(64));
  const std::string wire = reply.SerializeAsString();
  std::string out(63, '\0');
  absl::Status s = read_range_reply_into(in_slices(wire, {}), {out.data(), out.size()});
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("returned 64 bytes for a range of 63"), std::string::npos);
  std::string full(64, '\0');
  const std::string truncated = wire.substr(0, wire.size() - 1);
  EXPECT_EQ(read_range_reply_into(in_slices(truncated, {}), {full.data(), full.size()}).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(read_range_reply_into(in_slices(std::string("\x0f", 1), {}), {full.data(), 64}).code(),
            absl::StatusCode::kDataLoss);  // wire type 7
  EXPECT_EQ(read_range_reply_into(grpc::ByteBuffer(), {full.data(), full.size()}).code(),
            absl::StatusCode::kDataLoss);  // no data at all
}

}  // namespace
}  // namespace matserve::client
