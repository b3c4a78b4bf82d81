// Turns a measured autotune table (kernels/autotune.h) into the runtime's TunedChoice for `auto`:
// the fastest measured variant for the problem's shape class on this device, among those whose
// constraints accept the exact problem.
#pragma once

#include <string>

#include "kernels/autotune.h"
#include "server/runtime/variant_selection.h"

namespace matserve::server {

TunedChoice make_tuned_choice(const kernels::AutotuneTable& table, const std::string& device_name,
                              kernels::Backend backend);

}  // namespace matserve::server
