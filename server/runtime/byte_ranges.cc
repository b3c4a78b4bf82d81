// Disjoint byte ranges: see byte_ranges.h.
#include "server/runtime/byte_ranges.h"

#include <iterator>

namespace matserve::server {

std::pair<std::uint64_t, std::uint64_t> ByteRanges::overlap(std::uint64_t offset,
                                                            std::uint64_t length) const {
  if (length == 0) return {0, 0};
  const std::uint64_t end = offset + length;
  // The range starting before `offset` overlaps when it ends past it; otherwise the first one
  // starting at or after `offset` overlaps when it starts before `end`.
  auto it = ranges_.lower_bound(offset);
  if (it != ranges_.begin()) {
    auto prev = std::prev(it);
    if (prev->second > offset) return {prev->first, prev->second};
  }
  if (it != ranges_.end() && it->first < end) return {it->first, it->second};
  return {0, 0};
}

bool ByteRanges::adjacent(std::uint64_t offset, std::uint64_t length) const {
  if (ranges_.contains(offset + length)) return true;
  auto it = ranges_.lower_bound(offset);
  return it != ranges_.begin() && std::prev(it)->second == offset;
}

bool ByteRanges::insert(std::uint64_t offset, std::uint64_t length) {
  if (length == 0) return true;
  if (overlap(offset, length).second != 0) return false;
  std::uint64_t begin = offset;
  std::uint64_t end = offset + length;
  auto next = ranges_.lower_bound(offset);
  if (next != ranges_.end() && next->first == end) {
    end = next->second;
    next = ranges_.erase(next);
  }
  if (next != ranges_.begin()) {
    auto prev = std::prev(next);
    if (prev->second == begin) {
      prev->second = end;
      covered_ += length;
      return true;
    }
  }
  ranges_.emplace(begin, end);
  covered_ += length;
  return true;
}

void ByteRanges::erase(std::uint64_t offset, std::uint64_t length) {
  if (length == 0) return;
  const std::uint64_t end = offset + length;
  auto it = ranges_.upper_bound(offset);
  if (it == ranges_.begin()) return;
  --it;
  const std::uint64_t begin = it->first;
  const std::uint64_t held_end = it->second;
  if (held_end < end) return;  // not held whole: nothing to give back
  ranges_.erase(it);
  if (begin < offset) ranges_.emplace(begin, offset);
  if (end < held_end) ranges_.emplace(end, held_end);
  covered_ -= length;
}

}  // namespace matserve::server
