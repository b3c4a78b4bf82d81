// gRPC handlers of matserve.v1.MatrixService: pass the call gate (call_gate.h: drain,
// authentication, quota, the owner's handles and regions), decode and validate, hand the job to
// the runtime, encode the reply, map errors to gRPC status, and report every request to the
// metrics. The
// compute RPCs live in matrix_service.cc, the resident-matrix RPCs in matrix_service_resident.cc,
// the ranged-transfer RPCs in matrix_service_ranges.cc, the shared-memory region RPCs in
// matrix_service_shm.cc.
#pragma once

#include <string>

#include "matserve/v1/matrix_service.grpc.pb.h"
#include "server/metrics/metrics.h"
#include "server/runtime/cpu_keep_awake.h"
#include "server/runtime/runtime.h"
#include "server/service/auth.h"
#include "server/service/call_gate.h"
#include "server/service/limits.h"
#include "server/service/validation.h"

namespace matserve::server {

struct ComputeRpc;  // compute_call.h

class MatrixServiceImpl final : public v1::MatrixService::Service {
 public:
  // `keep_awake` (may be null: off) hears of every call that does work.
  MatrixServiceImpl(Runtime& runtime, Metrics& metrics, const ServiceLimits& limits,
                    const Authenticator& auth, CpuKeepAwake* keep_awake = nullptr);

  grpc::Status Multiply(grpc::ServerContext* context, const v1::MultiplyRequest* request,
                        v1::MultiplyReply* reply) override;
  grpc::Status MultiplyBatched(grpc::ServerContext* context,
                               const v1::MultiplyBatchedRequest* request,
                               v1::MultiplyBatchedReply* reply) override;
  grpc::Status Transpose(grpc::ServerContext* context, const v1::TransposeRequest* request,
                         v1::TransposeReply* reply) override;
  grpc::Status ListKernels(grpc::ServerContext* context, const v1::ListKernelsRequest* request,
                           v1::ListKernelsReply* reply) override;
  grpc::Status GetServerInfo(grpc::ServerContext* context, const v1::GetServerInfoRequest* request,
                             v1::GetServerInfoReply* reply) override;

  grpc::Status Upload(grpc::ServerContext* context, const v1::UploadRequest* request,
                      v1::UploadReply* reply) override;
  grpc::Status UploadStream(grpc::ServerContext* context,
                            grpc::ServerReader<v1::UploadChunk>* reader,
                            v1::UploadReply* reply) override;
  grpc::Status Download(grpc::ServerContext* context, const v1::DownloadRequest* request,
                        v1::DownloadReply* reply) override;
  grpc::Status DownloadStream(grpc::ServerContext* context, const v1::DownloadRequest* request,
                              grpc::ServerWriter<v1::DownloadChunk>* writer) override;
  // The two streaming handlers on gRPC's stream interfaces (the overrides above call them), so
  // that the fuzzer can drive them without a gRPC server in between.
  grpc::Status upload_stream(grpc::ServerContext* context,
                             grpc::ServerReaderInterface<v1::UploadChunk>* reader,
                             v1::UploadReply* reply);
  grpc::Status download_stream(grpc::ServerContext* context, const v1::DownloadRequest* request,
                               grpc::ServerWriterInterface<v1::DownloadChunk>* writer);
  grpc::Status Release(grpc::ServerContext* context, const v1::ReleaseRequest* request,
                       v1::ReleaseReply* reply) override;
  grpc::Status ListResident(grpc::ServerContext* context, const v1::ListResidentRequest* request,
                            v1::ListResidentReply* reply) override;
  grpc::Status CreateResident(grpc::ServerContext* context,
                              const v1::CreateResidentRequest* request,
                              v1::UploadReply* reply) override;
  grpc::Status WriteRange(grpc::ServerContext* context, const v1::WriteRangeRequest* request,
                          v1::WriteRangeReply* reply) override;
  grpc::Status ReadRange(grpc::ServerContext* context, const v1::ReadRangeRequest* request,
                         v1::ReadRangeReply* reply) override;

  grpc::Status RegisterSharedMemory(grpc::ServerContext* context,
                                    const v1::RegisterSharedMemoryRequest* request,
                                    v1::RegisterSharedMemoryReply* reply) override;
  grpc::Status UnregisterSharedMemory(grpc::ServerContext* context,
                                      const v1::UnregisterSharedMemoryRequest* request,
                                      v1::UnregisterSharedMemoryReply* reply) override;
  grpc::Status RegisterCudaMemory(grpc::ServerContext* context,
                                  const v1::RegisterCudaMemoryRequest* request,
                                  v1::RegisterSharedMemoryReply* reply) override;
  grpc::Status ListSharedMemory(grpc::ServerContext* context,
                                const v1::ListSharedMemoryRequest* request,
                                v1::ListSharedMemoryReply* reply) override;

  // The first step of a graceful shutdown: from now on every call that has not yet started its
  // work is refused with UNAVAILABLE (safe to retry elsewhere: nothing was done), while calls
  // already past `authorize` finish. Requests still arriving (a large message in transmission)
  // get that answer too instead of being cut off by gRPC's Shutdown.
  void begin_drain() { gate_.begin_drain(); }

 private:
  // After a job that used shared memory: FAILED_PRECONDITION when the job reached a page a
  // truncation took away (the result would be garbage), else OK. (Each region's size was checked
  // when the request named it.)
  static absl::Status regions_intact(const std::vector<std::shared_ptr<SharedMemoryRegion>>& r);
  // Streams that move no chunk for this long are cancelled (--stream_idle_timeout_seconds).
  absl::Duration stream_idle_timeout() const;
  absl::Status stream_idle_error(const char* field) const;
  void fill_resident(ResidentMatrix& m, v1::ResidentInfo* out);
  // The lifecycle of Multiply, MultiplyBatched and Transpose, with the RPC's own steps (defined
  // in compute_call.h).
  template <typename Job, typename Request, typename Reply, typename Steps>
  grpc::Status compute_call(const ComputeRpc& rpc, grpc::ServerContext& context,
                            const Request& request, Reply& reply, Steps steps);
  // Ends a unary RPC that manages shared-memory regions: clears the reply on failure, records
  // it, maps the status (defined in matrix_service_shm.cc, where it is used).
  template <typename Request, typename Reply>
  grpc::Status finish_simple(const char* rpc, const absl::Status& status, const Request& request,
                             Reply& reply, absl::Time start);
  // Records an RPC that moves or manages resident matrices.
  void record_simple(const std::string& rpc, const absl::Status& status, std::int64_t received,
                     std::int64_t sent, absl::Time start);

  // Held by each call that does work for its whole run: the in-flight gauge and the CPU
  // keep-awake's count.
  struct CallScope {
    Metrics::InFlight in_flight;
    CpuKeepAwake::Call awake;
  };
  // `heavy`: the call moves megabytes through the host (see CpuKeepAwake::call_started).
  CallScope begin_call(bool heavy) {
    return CallScope{metrics_.in_flight(), CpuKeepAwake::Call(keep_awake_, heavy)};
  }

  Runtime& runtime_;
  Metrics& metrics_;
  ServiceLimits limits_;
  CpuKeepAwake* keep_awake_;
  CallGate gate_;  // over runtime_ and limits_ (declared before it)
};

}  // namespace matserve::server
