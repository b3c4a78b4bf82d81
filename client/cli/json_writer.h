// A minimal JSON writer for the CLI's --json output: one object per run, keys in insertion order,
// numbers in their shortest round-trip form, NaN and infinities as null. No parsing.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace matserve::client::cli {

// Escapes `s` as a JSON string literal, quotes included.
std::string json_string(std::string_view s);

// Shortest decimal that reads back as `v`; "null" for NaN and infinities.
std::string json_number(double v);

// Builds `{"k": v, ...}`. Values given as raw JSON (raw) are inserted verbatim, which nests
// objects and arrays built by other writers.
class JsonObject {
 public:
  JsonObject& add(std::string_view key, std::string_view value);
  JsonObject& add(std::string_view key, const char* value) {
    return add(key, std::string_view(value));
  }
  JsonObject& add(std::string_view key, double value);
  JsonObject& add(std::string_view key, std::int64_t value);
  JsonObject& add(std::string_view key, int value) { return add(key, std::int64_t{value}); }
  JsonObject& add(std::string_view key, bool value);
  JsonObject& raw(std::string_view key, std::string_view json);
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void Key(std::string_view key);
  std::string body_;
};

// `[a, b, ...]` from already-encoded JSON values.
class JsonArray {
 public:
  JsonArray& raw(std::string_view json);
  JsonArray& add(std::string_view s) { return raw(json_string(s)); }
  std::string str() const { return "[" + body_ + "]"; }

 private:
  std::string body_;
};

}  // namespace matserve::client::cli
