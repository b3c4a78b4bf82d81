// A set of disjoint byte ranges [begin, end) of one buffer, adjacent ranges merged: which bytes of
// a resident matrix being filled range by range (WriteRange) are already claimed. Inserting a range
// that overlaps one already in the set is refused; erasing gives a failed range's bytes back.
#pragma once

#include <cstdint>
#include <map>

namespace matserve::server {

class ByteRanges {
 public:
  // Adds [offset, offset + length); false (and no change) when it overlaps a range already held.
  // An empty range is always accepted and changes nothing.
  bool insert(std::uint64_t offset, std::uint64_t length);
  // Removes [offset, offset + length), which must have been inserted (whole or as part of a
  // merged range); splits the range that holds it.
  void erase(std::uint64_t offset, std::uint64_t length);
  // Bytes held, and how many separate ranges hold them.
  std::uint64_t covered() const { return covered_; }
  std::size_t pieces() const { return ranges_.size(); }
  // True when a held range ends at `offset` or starts at `offset + length` (inserting the range
  // would merge with it).
  bool adjacent(std::uint64_t offset, std::uint64_t length) const;
  // The first range held that overlaps [offset, offset + length), as {begin, end}; {0, 0} if none.
  std::pair<std::uint64_t, std::uint64_t> overlap(std::uint64_t offset, std::uint64_t length) const;

 private:
  std::map<std::uint64_t, std::uint64_t> ranges_;  // begin -> end
  std::uint64_t covered_ = 0;
};

}  // namespace matserve::server
