// JSON encoding for the CLI: string escaping per RFC 8259, std::to_chars for numbers.
#include "client/cli/json_writer.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace matserve::client::cli {

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
  return out;
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

void JsonObject::Key(std::string_view key) {
  if (!body_.empty()) body_ += ", ";
  body_ += json_string(key);
  body_ += ": ";
}

JsonObject& JsonObject::add(std::string_view key, std::string_view value) {
  return raw(key, json_string(value));
}

JsonObject& JsonObject::add(std::string_view key, double value) {
  return raw(key, json_number(value));
}

JsonObject& JsonObject::add(std::string_view key, std::int64_t value) {
  return raw(key, std::to_string(value));
}

JsonObject& JsonObject::add(std::string_view key, bool value) {
  return raw(key, value ? "true" : "false");
}

JsonObject& JsonObject::raw(std::string_view key, std::string_view json) {
  Key(key);
  body_ += json;
  return *this;
}

JsonArray& JsonArray::raw(std::string_view json) {
  if (!body_.empty()) body_ += ", ";
  body_ += json;
  return *this;
}

}  // namespace matserve::client::cli
