// The ranged-transfer messages on the wire without protobuf's copies of their bytes: a
// WriteRangeRequest as a ByteBuffer whose data field is a slice of the caller's own memory (sent
// from there, no copy), and a ReadRangeReply's data field copied from the received slices straight
// into the caller's buffer (one copy, where parsing into a message and copying out of it make two).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "grpcpp/support/byte_buffer.h"

namespace matserve::client {

// WriteRangeRequest{handle = 1, offset = 2, data = 3}. `data` is referenced, not copied: it must
// stay valid and unchanged until the call that sends the buffer has finished.
grpc::ByteBuffer write_range_request(std::string_view handle, std::int64_t offset,
                                     std::string_view data);

// Copies the data field of ReadRangeReply `reply` into `out`, which must be exactly its size
// (DATA_LOSS otherwise, or when the message is malformed); other fields are skipped.
absl::Status read_range_reply_into(const grpc::ByteBuffer& reply, std::span<char> out);

}  // namespace matserve::client
