// Reads values out of a Prometheus text exposition for tests: the sum of every sample of a metric
// whose labels include the given ones (so {} sums the whole family), and the set of families.
#pragma once

#include <map>
#include <sstream>
#include <string>

namespace matserve::server::testing {

// Labels of one sample line, e.g. {device="cpu",state="in_use"}.
inline std::map<std::string, std::string> parse_labels(const std::string& s) {
  std::map<std::string, std::string> out;
  std::size_t i = 0;
  while (i < s.size()) {
    const std::size_t eq = s.find('=', i);
    if (eq == std::string::npos) break;
    const std::string name = s.substr(i, eq - i);
    std::string value;
    std::size_t j = eq + 2;  // past ="
    for (; j < s.size() && s[j] != '"'; ++j) {
      if (s[j] == '\\' && j + 1 < s.size()) ++j;
      value.push_back(s[j]);
    }
    out[name] = value;
    i = j + 2;  // past ",
  }
  return out;
}

// Sum of the samples of `name` whose labels contain every pair of `want`; -1 when none matched.
inline double sample_sum(const std::string& text, const std::string& name,
                         const std::map<std::string, std::string>& want = {}) {
  std::istringstream in(text);
  double sum = 0;
  bool found = false;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const std::size_t brace = line.find('{');
    const std::size_t space = line.rfind(' ');
    const std::string metric = line.substr(0, std::min(brace, line.find(' ')));
    if (metric != name) continue;
    std::map<std::string, std::string> labels;
    if (brace != std::string::npos) {
      labels = parse_labels(line.substr(brace + 1, line.rfind('}') - brace - 1));
    }
    bool match = true;
    for (const auto& [k, v] : want) {
      const auto it = labels.find(k);
      match = match && it != labels.end() && it->second == v;
    }
    if (!match) continue;
    sum += std::stod(line.substr(space + 1));
    found = true;
  }
  return found ? sum : -1;
}

inline bool has_family(const std::string& text, const std::string& name) {
  return text.find("# TYPE " + name + " ") != std::string::npos;
}

}  // namespace matserve::server::testing
