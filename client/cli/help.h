// matserve-cli's --help texts: one general, one per command. The multiply/transpose texts end with
// the server's kernel list when it is reachable (formatted by KernelListForHelp).
#pragma once

#include <optional>
#include <string>

#include "client/cli/args.h"
#include "matserve/v1/matrix_service.pb.h"

namespace matserve::client::cli {

std::string GeneralHelp();

// `kernel_list` is KernelListForHelp's text, or empty when the server could not be asked.
std::string CommandHelp(Command command, const std::string& kernel_list);

// "  name  precisions  description" lines for the kernels of `op`.
std::string KernelListForHelp(const matserve::v1::ListKernelsReply& reply,
                              matserve::v1::Operation op);

}  // namespace matserve::client::cli
