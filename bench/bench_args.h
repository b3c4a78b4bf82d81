// What every benchmark's command line and report share: "--key=value" arguments, comma lists,
// the median of a sample, and "print the Markdown table, and write it to --md when given".
#pragma once

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace matserve::bench {

// "a,b,,c" -> {"a", "b", "c"}.
inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// "--key=value" -> key, value; false for anything else.
inline bool key_value(const std::string& arg, std::string* key, std::string* value) {
  const auto eq = arg.find('=');
  if (arg.rfind("--", 0) != 0 || eq == std::string::npos) return false;
  *key = arg.substr(2, eq - 2);
  *value = arg.substr(eq + 1);
  return true;
}

// The upper median (0 for an empty sample).
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// Prints `text` on stdout and writes it to `path` too unless that is empty.
inline void emit_report(const std::string& text, const std::string& path) {
  std::fputs(text.c_str(), stdout);
  if (!path.empty()) std::ofstream(path) << text;
}

}  // namespace matserve::bench
