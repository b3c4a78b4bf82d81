// matserve-cli's --help texts: one general, one per command. The multiply/transpose texts end with
// the server's kernel list when it is reachable (formatted by kernel_list_for_help).
#pragma once

#include <optional>
#include <string>

#include "client/cli/args.h"
#include "matserve/v1/matrix_service.pb.h"

namespace matserve::client::cli {

std::string general_help();

// `kernel_list` is kernel_list_for_help's text, or empty when the server could not be asked.
std::string command_help(Command command, const std::string& kernel_list);

// "  name  precisions  description" lines for the kernels of `op`.
std::string kernel_list_for_help(const matserve::v1::ListKernelsReply& reply,
                                 matserve::v1::Operation op);

}  // namespace matserve::client::cli
