// run_cli: parse, then dispatch to one command. `info`, `kernels`, `health` and the help texts
// live here; multiply, transpose and the resident-matrix commands have their own files.
#include "client/cli/commands.h"

#include "client/cli/args.h"
#include "client/cli/command_util.h"
#include "client/cli/help.h"
#include "client/cli/report.h"

namespace matserve::client::cli {
namespace {

namespace v1 = ::matserve::v1;

int run_info(const Env& env) {
  absl::StatusOr<std::unique_ptr<Client>> client = make_client(env.global);
  if (!client.ok()) return input_error(env.err, client.status());
  absl::StatusOr<v1::GetServerInfoReply> reply = (*client)->get_server_info();
  if (!reply.ok()) return rpc_error(env.err, reply.status());
  print_info(*reply, env.global.target, env.global.json, env.out);
  return kExitOk;
}

// Exit 0 when SERVING, kExitNotServing for any other answer, kExitRpc when there is none: a
// container health check needs nothing else (no token: the health service takes none).
int run_health(const Env& env, const HealthOptions& opt) {
  absl::StatusOr<std::unique_ptr<Client>> client = make_client(env.global);
  if (!client.ok()) return input_error(env.err, client.status());
  absl::StatusOr<std::string> status = (*client)->health(opt.service);
  if (!status.ok()) return rpc_error(env.err, status.status());
  print_health(opt.service, *status, env.global.json, env.out);
  return *status == "SERVING" ? kExitOk : kExitNotServing;
}

int run_kernels(const Env& env, const KernelsOptions& opt) {
  absl::StatusOr<std::unique_ptr<Client>> client = make_client(env.global);
  if (!client.ok()) return input_error(env.err, client.status());
  absl::StatusOr<v1::ListKernelsReply> reply = (*client)->list_kernels();
  if (!reply.ok()) return rpc_error(env.err, reply.status());
  print_kernels(*reply, opt.op, env.global.json, env.out);
  return kExitOk;
}

// Help for multiply/transpose lists the server's kernels when it answers within two seconds.
int run_help(const Env& env, Command command) {
  std::string kernel_list;
  if (command == Command::kMultiply || command == Command::kTranspose) {
    absl::StatusOr<std::unique_ptr<Client>> client =
        make_client(env.global, std::chrono::milliseconds(2000));
    if (client.ok()) {
      absl::StatusOr<v1::ListKernelsReply> reply = (*client)->list_kernels();
      if (reply.ok()) {
        kernel_list =
            kernel_list_for_help(*reply, command == Command::kMultiply ? v1::GEMM : v1::TRANSPOSE);
      }
    }
  }
  env.out << command_help(command, kernel_list);
  return kExitOk;
}

// The command named in `args`, for the usage hint when parsing failed part way.
Command command_in(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    for (Command c : {Command::kInfo, Command::kKernels, Command::kMultiply, Command::kTranspose,
                      Command::kUpload, Command::kDownload, Command::kRelease, Command::kResident,
                      Command::kHealth}) {
      if (a == CommandName(c)) return c;
    }
  }
  return Command::kNone;
}

}  // namespace

int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  absl::StatusOr<ParsedArgs> parsed = parse_args(args);
  if (!parsed.ok()) return usage_error(err, parsed.status(), command_in(args));
  for (const std::string& warning : parsed->warnings) err << "warning: " << warning << '\n';
  const Env env{parsed->global, out, err};
  if (parsed->help) return run_help(env, parsed->command);
  switch (parsed->command) {
    case Command::kInfo: return run_info(env);
    case Command::kKernels: return run_kernels(env, parsed->kernels);
    case Command::kMultiply:
      return parsed->multiply.batch > 1 ? run_multiply_batched(env, parsed->multiply)
                                        : run_multiply(env, parsed->multiply);
    case Command::kTranspose: return run_transpose(env, parsed->transpose);
    case Command::kUpload: return run_upload(env, parsed->upload);
    case Command::kDownload: return run_download(env, parsed->handle);
    case Command::kRelease: return run_release(env, parsed->handle);
    case Command::kResident: return run_resident(env);
    case Command::kHealth: return run_health(env, parsed->health);
    default: break;
  }
  return run_help(env, Command::kNone);
}

}  // namespace matserve::client::cli
