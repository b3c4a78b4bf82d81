// RunCli: parse, then dispatch to one command. `info`, `kernels`, `health` and the help texts
// live here; multiply, transpose and the resident-matrix commands have their own files.
#include "client/cli/commands.h"

#include "client/cli/args.h"
#include "client/cli/command_util.h"
#include "client/cli/help.h"
#include "client/cli/report.h"

namespace matserve::client::cli {
namespace {

namespace v1 = ::matserve::v1;

int RunInfo(const Env& env) {
  absl::StatusOr<std::unique_ptr<Client>> client = MakeClient(env.global);
  if (!client.ok()) return InputError(env.err, client.status());
  absl::StatusOr<v1::GetServerInfoReply> reply = (*client)->GetServerInfo();
  if (!reply.ok()) return RpcError(env.err, reply.status());
  PrintInfo(*reply, env.global.target, env.global.json, env.out);
  return kExitOk;
}

// Exit 0 when SERVING, kExitNotServing for any other answer, kExitRpc when there is none: a
// container health check needs nothing else (no token: the health service takes none).
int RunHealth(const Env& env, const HealthOptions& opt) {
  absl::StatusOr<std::unique_ptr<Client>> client = MakeClient(env.global);
  if (!client.ok()) return InputError(env.err, client.status());
  absl::StatusOr<std::string> status = (*client)->Health(opt.service);
  if (!status.ok()) return RpcError(env.err, status.status());
  PrintHealth(opt.service, *status, env.global.json, env.out);
  return *status == "SERVING" ? kExitOk : kExitNotServing;
}

int RunKernels(const Env& env, const KernelsOptions& opt) {
  absl::StatusOr<std::unique_ptr<Client>> client = MakeClient(env.global);
  if (!client.ok()) return InputError(env.err, client.status());
  absl::StatusOr<v1::ListKernelsReply> reply = (*client)->ListKernels();
  if (!reply.ok()) return RpcError(env.err, reply.status());
  PrintKernels(*reply, opt.op, env.global.json, env.out);
  return kExitOk;
}

// Help for multiply/transpose lists the server's kernels when it answers within two seconds.
int RunHelp(const Env& env, Command command) {
  std::string kernel_list;
  if (command == Command::kMultiply || command == Command::kTranspose) {
    absl::StatusOr<std::unique_ptr<Client>> client =
        MakeClient(env.global, std::chrono::milliseconds(2000));
    if (client.ok()) {
      absl::StatusOr<v1::ListKernelsReply> reply = (*client)->ListKernels();
      if (reply.ok()) {
        kernel_list =
            KernelListForHelp(*reply, command == Command::kMultiply ? v1::GEMM : v1::TRANSPOSE);
      }
    }
  }
  env.out << CommandHelp(command, kernel_list);
  return kExitOk;
}

// The command named in `args`, for the usage hint when parsing failed part way.
Command CommandIn(const std::vector<std::string>& args) {
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

int RunCli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  absl::StatusOr<ParsedArgs> parsed = ParseArgs(args);
  if (!parsed.ok()) return UsageError(err, parsed.status(), CommandIn(args));
  for (const std::string& warning : parsed->warnings) err << "warning: " << warning << '\n';
  const Env env{parsed->global, out, err};
  if (parsed->help) return RunHelp(env, parsed->command);
  switch (parsed->command) {
    case Command::kInfo: return RunInfo(env);
    case Command::kKernels: return RunKernels(env, parsed->kernels);
    case Command::kMultiply:
      return parsed->multiply.batch > 1 ? RunMultiplyBatched(env, parsed->multiply)
                                        : RunMultiply(env, parsed->multiply);
    case Command::kTranspose: return RunTranspose(env, parsed->transpose);
    case Command::kUpload: return RunUpload(env, parsed->upload);
    case Command::kDownload: return RunDownload(env, parsed->handle);
    case Command::kRelease: return RunRelease(env, parsed->handle);
    case Command::kResident: return RunResident(env);
    case Command::kHealth: return RunHealth(env, parsed->health);
    default: break;
  }
  return RunHelp(env, Command::kNone);
}

}  // namespace matserve::client::cli
