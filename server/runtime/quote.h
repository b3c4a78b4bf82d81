// Client-supplied strings (handles, variant names) as error messages quote them: escaped, and cut
// to a few dozen characters, so that a megabyte of garbage in a field cannot make the status
// message itself too large for the client to receive (gRPC carries it in a header).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace matserve::server {

inline constexpr std::size_t kMaxQuoted = 64;

// 'value' with non-printable bytes escaped; longer values end in "...' (N bytes)".
inline std::string quote(std::string_view text) {
  const absl::string_view value(text.data(), text.size());
  if (value.size() <= kMaxQuoted) return absl::StrCat("'", absl::CHexEscape(value), "'");
  return absl::StrCat("'", absl::CHexEscape(value.substr(0, kMaxQuoted)), "...' (", value.size(),
                      " bytes)");
}

}  // namespace matserve::server
