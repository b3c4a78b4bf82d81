// Resident-matrix commands: `upload` (file or --random into device memory; streamed with
// --chunk-mb or when larger than one message), `download` (to --out), `release`, `resident`.
#include <utility>

#include "client/cli/command_util.h"
#include "client/cli/commands.h"
#include "client/cli/report.h"
#include "client/cpp/matrix.h"

namespace matserve::client::cli {

namespace v1 = ::matserve::v1;

int RunUpload(const Env& env, const UploadOptions& opt) {
  NpyArray a;
  if (opt.random) {
    a = RandomMatrix((*opt.random)[0], (*opt.random)[1], opt.dtype.value_or(kernels::DType::kF32),
                     opt.layout, opt.seed);
  } else {
    absl::StatusOr<NpyArray> la = LoadInput(opt.a, opt.dtype);
    if (!la.ok()) return InputError(env.err, la.status());
    a = *std::move(la);
  }
  absl::StatusOr<v1::Matrix> matrix = MatrixFromNpy(std::move(a));
  if (!matrix.ok()) return InputError(env.err, matrix.status());
  absl::StatusOr<std::unique_ptr<Client>> client = MakeClient(env.global);
  if (!client.ok()) return InputError(env.err, client.status());
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<v1::ResidentInfo> info =
      (*client)->Upload(*matrix, opt.chunk_bytes, opt.colocate_with);
  const double rpc_us = MicrosSince(start);
  if (!info.ok()) return RpcError(env.err, info.status());
  PrintUpload(*info, rpc_us, env.global.json, env.out);
  return kExitOk;
}

int RunDownload(const Env& env, const HandleOptions& opt) {
  absl::StatusOr<std::unique_ptr<Client>> client = MakeClient(env.global);
  if (!client.ok()) return InputError(env.err, client.status());
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<v1::Matrix> matrix = opt.chunk_bytes > 0
                                          ? (*client)->DownloadStream(opt.handle, opt.chunk_bytes)
                                          : (*client)->Download(opt.handle);
  const double rpc_us = MicrosSince(start);
  if (!matrix.ok()) {
    const int code = RpcError(env.err, matrix.status());
    if (matrix.status().code() == absl::StatusCode::kResourceExhausted && opt.chunk_bytes == 0) {
      env.err << "hint: a matrix larger than one message downloads with --chunk-mb N\n";
    }
    return code;
  }
  if (!opt.out.empty()) {
    absl::StatusOr<NpyArray> array = NpyFromMatrix(*matrix);
    if (!array.ok()) return RpcError(env.err, absl::DataLossError(array.status().message()));
    if (absl::Status s = WriteNpy(opt.out, *array); !s.ok()) return InputError(env.err, s);
  }
  PrintDownload(opt.handle, *matrix, opt.out, rpc_us, env.global.json, env.out);
  return kExitOk;
}

int RunRelease(const Env& env, const HandleOptions& opt) {
  absl::StatusOr<std::unique_ptr<Client>> client = MakeClient(env.global);
  if (!client.ok()) return InputError(env.err, client.status());
  absl::StatusOr<v1::ReleaseReply> reply = (*client)->Release(opt.handle);
  if (!reply.ok()) return RpcError(env.err, reply.status());
  PrintRelease(opt.handle, *reply, env.global.json, env.out);
  return kExitOk;
}

int RunResident(const Env& env) {
  absl::StatusOr<std::unique_ptr<Client>> client = MakeClient(env.global);
  if (!client.ok()) return InputError(env.err, client.status());
  absl::StatusOr<v1::ListResidentReply> reply = (*client)->ListResident();
  if (!reply.ok()) return RpcError(env.err, reply.status());
  PrintResidentList(*reply, env.global.json, env.out);
  return kExitOk;
}

}  // namespace matserve::client::cli
