// Autotune-backed `auto`: see autotune_choice.h.
#include "server/runtime/autotune_choice.h"

#include <memory>
#include <utility>

namespace matserve::server {

TunedChoice make_tuned_choice(kernels::AutotuneTable table, std::string device_name,
                              kernels::Backend backend) {
  auto shared = std::make_shared<const kernels::AutotuneTable>(std::move(table));
  return [shared, device_name = std::move(device_name),
          backend](const kernels::GemmProblem& p) -> std::optional<std::string> {
    const auto usable = [&](std::string_view name) {
      const kernels::GemmVariant* v = kernels::find_gemm_variant(name);
      return v != nullptr && v->backend == backend && kernels::check_gemm_variant(*v, p).ok();
    };
    return shared->choose(device_name, p.precision, p.m, p.n, p.k, usable);
  };
}

}  // namespace matserve::server
