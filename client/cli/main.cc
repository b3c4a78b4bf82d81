// matserve-cli: the command-line client of the matserve service (info, kernels, multiply,
// transpose). All logic lives in commands.cc so the tests can run it in-process.
#include <iostream>
#include <string>
#include <vector>

#include "client/cli/commands.h"
#include "client/cpp/process_settings.h"

int main(int argc, char** argv) {
  std::ios::sync_with_stdio(false);
  matserve::client::turn_off_lock_order_checks();
  const std::vector<std::string> args(argv + 1, argv + argc);
  return matserve::client::cli::run_cli(args, std::cout, std::cerr);
}
