// matserve-cli's entry point as a function: parses, runs one command against the server, prints to
// the given streams and returns the exit code, so tests can drive the whole CLI in-process.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace matserve::client::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitUsage = 1;       // bad arguments, unreadable or malformed input files
inline constexpr int kExitRpc = 2;         // the call failed: "error: <CODE>: <message>" on stderr
inline constexpr int kExitVerify = 3;      // a verification error above --tolerance
inline constexpr int kExitNotServing = 4;  // `health`: the server answered, but not SERVING

// `args` excludes the program name.
int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace matserve::client::cli
