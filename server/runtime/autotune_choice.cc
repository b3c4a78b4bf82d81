// Autotune-backed `auto`: see autotune_choice.h. The table is ranked once, at start, per
// (precision, shape class) of this device, with the variants resolved to registry entries, so a
// request costs one hash look-up and the constraint checks of the variants it tries.
#include "server/runtime/autotune_choice.h"

#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace matserve::server {
namespace {

std::string key(kernels::Precision precision, std::string_view shape_class) {
  std::string k(1, static_cast<char>(precision));
  k.append(shape_class);
  return k;
}

}  // namespace

TunedChoice make_tuned_choice(const kernels::AutotuneTable& table, const std::string& device_name,
                              kernels::Backend backend) {
  using Ranked = std::vector<const kernels::GemmVariant*>;
  auto ranked = std::make_shared<absl::flat_hash_map<std::string, Ranked>>();
  std::set<std::pair<kernels::Precision, std::string>> classes;
  for (const kernels::AutotuneEntry& e : table.entries()) {
    if (e.device == device_name) classes.emplace(e.precision, e.shape_class);
  }
  for (const auto& [precision, shape_class] : classes) {
    Ranked& r = (*ranked)[key(precision, shape_class)];
    for (const std::string& name : table.ranked(device_name, precision, shape_class)) {
      // Variants this build lacks (a table from a newer build) or of the other backend are
      // skipped, as AutotuneTable::choose's filter would.
      const kernels::GemmVariant* v = kernels::find_gemm_variant(name);
      if (v != nullptr && v->backend == backend) r.push_back(v);
    }
  }
  // Nothing measured (or nothing measured accepts the problem): cuBLAS, as AutotuneTable::choose.
  const kernels::GemmVariant* fallback = kernels::find_gemm_variant("cublas");
  // A batch is ranked by its own class's rows where there are some, then by the single
  // product's.
  return [ranked, fallback](const kernels::GemmProblem& p) -> const kernels::GemmVariant* {
    const auto first_usable = [&](const std::string& shape_class) -> const kernels::GemmVariant* {
      const auto it = ranked->find(key(p.precision, shape_class));
      if (it == ranked->end()) return nullptr;
      for (const kernels::GemmVariant* v : it->second) {
        if (kernels::check_gemm_variant(*v, p).ok()) return v;
      }
      return nullptr;
    };
    if (p.batch.count > 1) {
      if (const kernels::GemmVariant* v =
              first_usable(kernels::gemm_batch_shape_class(p.m, p.n, p.k))) {
        return v;
      }
    }
    if (const kernels::GemmVariant* v = first_usable(kernels::gemm_shape_class(p.m, p.n, p.k))) {
      return v;
    }
    return fallback;
  };
}

}  // namespace matserve::server
