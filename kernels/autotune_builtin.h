// The autotune tables measured for this release (kernels/autotune/*.tsv), compiled into the
// library so that `auto` uses them with no file to ship or flag to pass; the server's
// --autotune_table replaces them with a table measured on the spot.
#pragma once

#include <string_view>

namespace matserve::kernels {

// Every kernels/autotune/*.tsv at build time, concatenated (AutotuneTable::parse format).
std::string_view builtin_autotune_tsv();

}  // namespace matserve::kernels
