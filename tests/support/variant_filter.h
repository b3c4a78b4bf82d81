// The GPU tests' variant filter: MATSERVE_TEST_VARIANTS=a,b limits a run to the named variants
// (unset or empty: every variant), so one kernel can be checked on the device without the rest.
#pragma once

#include <cstdlib>
#include <sstream>
#include <string>
#include <string_view>

namespace matserve::testing {

inline bool variant_selected(std::string_view name) {
  const char* env = std::getenv("MATSERVE_TEST_VARIANTS");
  if (env == nullptr || *env == '\0') return true;
  std::stringstream list(env);
  for (std::string item; std::getline(list, item, ',');) {
    if (item == name) return true;
  }
  return false;
}

}  // namespace matserve::testing
