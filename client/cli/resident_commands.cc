// Resident-matrix commands: `upload` (file or --random into device memory; streamed with
// --chunk-mb or when larger than one message), `download` (to --out), `release`, `resident`.
#include <utility>

#include "client/cli/command_util.h"
#include "client/cli/commands.h"
#include "client/cli/report.h"
#include "client/cpp/matrix.h"

namespace matserve::client::cli {

namespace v1 = ::matserve::v1;

int run_upload(const Env& env, const UploadOptions& opt) {
  NpyArray a;
  if (opt.random) {
    a = random_matrix((*opt.random)[0], (*opt.random)[1], opt.dtype.value_or(kernels::DType::kF32),
                      opt.layout, opt.seed);
  } else {
    absl::StatusOr<NpyArray> la = load_input(opt.a, opt.dtype);
    if (!la.ok()) return input_error(env.err, la.status());
    a = *std::move(la);
  }
  absl::StatusOr<v1::Matrix> matrix = matrix_from_npy(std::move(a));
  if (!matrix.ok()) return input_error(env.err, matrix.status());
  absl::StatusOr<std::unique_ptr<Client>> client = make_client(env.global);
  if (!client.ok()) return input_error(env.err, client.status());
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<v1::ResidentInfo> info =
      (*client)->upload(*matrix, opt.chunk_bytes, opt.colocate_with);
  const double rpc_us = micros_since(start);
  if (!info.ok()) return rpc_error(env.err, info.status());
  print_upload(*info, rpc_us, env.global.json, env.out);
  return kExitOk;
}

int run_download(const Env& env, const HandleOptions& opt) {
  absl::StatusOr<std::unique_ptr<Client>> client = make_client(env.global);
  if (!client.ok()) return input_error(env.err, client.status());
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<v1::Matrix> matrix = opt.chunk_bytes > 0
                                          ? (*client)->download_stream(opt.handle, opt.chunk_bytes)
                                          : (*client)->download(opt.handle);
  const double rpc_us = micros_since(start);
  if (!matrix.ok()) {
    const int code = rpc_error(env.err, matrix.status());
    if (matrix.status().code() == absl::StatusCode::kResourceExhausted && opt.chunk_bytes == 0) {
      env.err << "hint: a matrix larger than one message downloads with --chunk-mb N\n";
    }
    return code;
  }
  if (!opt.out.empty()) {
    absl::StatusOr<NpyArray> array = npy_from_matrix(*matrix);
    if (!array.ok()) return rpc_error(env.err, absl::DataLossError(array.status().message()));
    if (absl::Status s = write_npy(opt.out, *array); !s.ok()) return input_error(env.err, s);
  }
  print_download(opt.handle, *matrix, opt.out, rpc_us, env.global.json, env.out);
  return kExitOk;
}

int run_release(const Env& env, const HandleOptions& opt) {
  absl::StatusOr<std::unique_ptr<Client>> client = make_client(env.global);
  if (!client.ok()) return input_error(env.err, client.status());
  absl::StatusOr<v1::ReleaseReply> reply = (*client)->release(opt.handle);
  if (!reply.ok()) return rpc_error(env.err, reply.status());
  print_release(opt.handle, *reply, env.global.json, env.out);
  return kExitOk;
}

int run_resident(const Env& env) {
  absl::StatusOr<std::unique_ptr<Client>> client = make_client(env.global);
  if (!client.ok()) return input_error(env.err, client.status());
  absl::StatusOr<v1::ListResidentReply> reply = (*client)->list_resident();
  if (!reply.ok()) return rpc_error(env.err, reply.status());
  print_resident_list(*reply, env.global.json, env.out);
  return kExitOk;
}

}  // namespace matserve::client::cli
