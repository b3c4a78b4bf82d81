// Hand-written wire format of WriteRangeRequest and ReadRangeReply: see range_wire.h.
#include "client/cpp/range_wire.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/support/slice.h"

namespace matserve::client {
namespace {

// Protobuf wire types and the tags of the fields written here.
constexpr std::uint32_t kVarint = 0;
constexpr std::uint32_t kLengthDelimited = 2;
constexpr std::uint32_t kFixed64 = 1;
constexpr std::uint32_t kFixed32 = 5;

void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_tag(std::string& out, std::uint32_t field, std::uint32_t wire_type) {
  put_varint(out, (field << 3) | wire_type);
}

// Reads bytes across a message's slices in order.
class SliceCursor {
 public:
  explicit SliceCursor(const grpc::ByteBuffer& buffer) { (void)buffer.Dump(&slices_); }

  bool done() {
    skip_empty();
    return at_ >= slices_.size();
  }
  bool byte(std::uint8_t& b) {
    skip_empty();
    if (at_ >= slices_.size()) return false;
    b = slices_[at_].begin()[pos_++];
    return true;
  }
  bool varint(std::uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      std::uint8_t b = 0;
      if (!byte(b)) return false;
      v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  // Copies the next n bytes to `to` (null: skips them).
  bool take(std::uint64_t n, char* to) {
    while (n > 0) {
      skip_empty();
      if (at_ >= slices_.size()) return false;
      const grpc::Slice& s = slices_[at_];
      const std::size_t here = std::min<std::uint64_t>(n, s.size() - pos_);
      if (to != nullptr) {
        std::memcpy(to, s.begin() + pos_, here);
        to += here;
      }
      pos_ += here;
      n -= here;
    }
    return true;
  }

 private:
  void skip_empty() {
    while (at_ < slices_.size() && pos_ >= slices_[at_].size()) {
      ++at_;
      pos_ = 0;
    }
  }

  std::vector<grpc::Slice> slices_;
  std::size_t at_ = 0;
  std::size_t pos_ = 0;
};

absl::Status malformed(const std::string& what) {
  return absl::DataLossError(absl::StrCat("ReadRange reply: ", what));
}

}  // namespace

grpc::ByteBuffer write_range_request(std::string_view handle, std::int64_t offset,
                                     std::string_view data) {
  std::string head;
  put_tag(head, 1, kLengthDelimited);
  put_varint(head, handle.size());
  head.append(handle);
  if (offset != 0) {
    put_tag(head, 2, kVarint);
    put_varint(head, static_cast<std::uint64_t>(offset));
  }
  put_tag(head, 3, kLengthDelimited);
  put_varint(head, data.size());
  grpc::Slice slices[2] = {grpc::Slice(head),
                           grpc::Slice(data.data(), data.size(), grpc::Slice::STATIC_SLICE)};
  return grpc::ByteBuffer(slices, data.empty() ? 1 : 2);
}

absl::Status read_range_reply_into(const grpc::ByteBuffer& reply, std::span<char> out) {
  SliceCursor in(reply);
  bool got = false;
  while (!in.done()) {
    std::uint64_t key = 0;
    if (!in.varint(key)) return malformed("a truncated field key");
    const auto field = static_cast<std::uint32_t>(key >> 3);
    const auto type = static_cast<std::uint32_t>(key & 7);
    std::uint64_t n = 0;
    switch (type) {
      case kVarint:
        if (!in.varint(n)) return malformed("a truncated varint");
        break;
      case kFixed64:
      case kFixed32:
        if (!in.take(type == kFixed64 ? 8 : 4, nullptr)) return malformed("a truncated field");
        break;
      case kLengthDelimited:
        if (!in.varint(n)) return malformed("a truncated length");
        if (field == 1) {
          if (n != out.size()) {
            return absl::DataLossError(
                absl::StrCat("ReadRange returned ", n, " bytes for a range of ", out.size()));
          }
          if (!in.take(n, out.data())) return malformed("data shorter than its length");
          got = true;
        } else if (!in.take(n, nullptr)) {
          return malformed("a truncated field");
        }
        break;
      default: return malformed(absl::StrCat("wire type ", type));
    }
  }
  if (!got && !out.empty()) {
    return absl::DataLossError(
        absl::StrCat("ReadRange returned 0 bytes for a range of ", out.size()));
  }
  return absl::OkStatus();
}

}  // namespace matserve::client
