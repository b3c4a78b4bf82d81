// An in-process stand-in for the matserve server, for client tests: computes every result with the
// float64 reference on the host (a MultiplyBatched product by product), keeps "resident" matrices
// in a map, answers fixed info/kernels/timings (a Multiply reports it was merged with another by
// dynamic batching), and misbehaves on request (variant "broken" perturbs one element, unknown
// variants are INVALID_ARGUMENT).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "grpcpp/server.h"
#include "matserve/v1/matrix_service.grpc.pb.h"

namespace matserve::client::testing {

class FakeMatrixService final : public matserve::v1::MatrixService::Service {
 public:
  grpc::Status Multiply(grpc::ServerContext*, const matserve::v1::MultiplyRequest* request,
                        matserve::v1::MultiplyReply* reply) override;
  grpc::Status MultiplyBatched(grpc::ServerContext*,
                               const matserve::v1::MultiplyBatchedRequest* request,
                               matserve::v1::MultiplyBatchedReply* reply) override;
  grpc::Status Transpose(grpc::ServerContext*, const matserve::v1::TransposeRequest* request,
                         matserve::v1::TransposeReply* reply) override;
  grpc::Status ListKernels(grpc::ServerContext*, const matserve::v1::ListKernelsRequest*,
                           matserve::v1::ListKernelsReply* reply) override;
  grpc::Status GetServerInfo(grpc::ServerContext*, const matserve::v1::GetServerInfoRequest*,
                             matserve::v1::GetServerInfoReply* reply) override;

  grpc::Status Upload(grpc::ServerContext*, const matserve::v1::UploadRequest* request,
                      matserve::v1::UploadReply* reply) override;
  grpc::Status UploadStream(grpc::ServerContext*,
                            grpc::ServerReader<matserve::v1::UploadChunk>* reader,
                            matserve::v1::UploadReply* reply) override;
  grpc::Status Download(grpc::ServerContext*, const matserve::v1::DownloadRequest* request,
                        matserve::v1::DownloadReply* reply) override;
  grpc::Status DownloadStream(grpc::ServerContext*, const matserve::v1::DownloadRequest* request,
                              grpc::ServerWriter<matserve::v1::DownloadChunk>* writer) override;
  grpc::Status Release(grpc::ServerContext*, const matserve::v1::ReleaseRequest* request,
                       matserve::v1::ReleaseReply* reply) override;
  grpc::Status ListResident(grpc::ServerContext*, const matserve::v1::ListResidentRequest*,
                            matserve::v1::ListResidentReply* reply) override;
  // Ranged transfer: UNIMPLEMENTED (as a server without it) until set_ranged(true).
  grpc::Status CreateResident(grpc::ServerContext*,
                              const matserve::v1::CreateResidentRequest* request,
                              matserve::v1::UploadReply* reply) override;
  grpc::Status WriteRange(grpc::ServerContext*, const matserve::v1::WriteRangeRequest* request,
                          matserve::v1::WriteRangeReply* reply) override;
  grpc::Status ReadRange(grpc::ServerContext*, const matserve::v1::ReadRangeRequest* request,
                         matserve::v1::ReadRangeReply* reply) override;

  // Handles made from now on are "<id>/h<n>", and GetServerInfo names the id (as a replica).
  void set_replica_id(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    replica_id_ = id;
  }
  int upload_calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return upload_calls_;
  }

  void set_ranged(bool on) {
    std::lock_guard<std::mutex> lock(mu_);
    ranged_ = on;
  }
  int write_range_calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return write_range_calls_;
  }
  // CreateResident places a matrix beside its colocate_with handle, else on these devices in turn
  // (as a multi-GPU server may); by default every matrix is on "cpu".
  void set_create_devices(std::vector<std::string> devices) {
    std::lock_guard<std::mutex> lock(mu_);
    create_devices_ = std::move(devices);
  }
  int create_resident_calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return create_resident_calls_;
  }
  // The device a resident matrix was created on ("" when unknown).
  std::string device_of(const std::string& handle) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = devices_.find(handle);
    return it == devices_.end() ? "" : it->second;
  }

  int upload_stream_chunks() const {
    std::lock_guard<std::mutex> lock(mu_);
    return upload_stream_chunks_;
  }
  int download_stream_chunks() const {
    std::lock_guard<std::mutex> lock(mu_);
    return download_stream_chunks_;
  }

  int multiply_calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return multiply_calls_;
  }

  matserve::v1::MultiplyRequest last_multiply() const {
    std::lock_guard<std::mutex> lock(mu_);
    return last_multiply_;
  }

  int multiply_batched_calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return multiply_batched_calls_;
  }

  matserve::v1::MultiplyBatchedRequest last_multiply_batched() const {
    std::lock_guard<std::mutex> lock(mu_);
    return last_multiply_batched_;
  }

  std::size_t resident_count() const {
    std::lock_guard<std::mutex> lock(mu_);
    return resident_.size();
  }

 private:
  // Stores `m` as a resident matrix under `handle` (a new one when empty); returns its info.
  matserve::v1::ResidentInfo keep(matserve::v1::Matrix m, std::string handle = "");
  // Replaces `*m` (when `handle` is set) by the stored matrix; NOT_FOUND for unknown handles.
  grpc::Status resolve(const std::string& handle, matserve::v1::Matrix* m) const;
  // Replaces the request's handles by the stored matrices; NOT_FOUND for unknown handles.
  grpc::Status resolve_handles(matserve::v1::MultiplyRequest& request) const;
  // A successful compute call's release_handles, as the server releases them.
  void release_named(const google::protobuf::RepeatedPtrField<std::string>& handles);
  // One product of inline operands (handles already resolved): the reply with C, or kept.
  grpc::Status Compute(const matserve::v1::MultiplyRequest& request,
                       matserve::v1::MultiplyReply* reply);

  mutable std::mutex mu_;
  matserve::v1::MultiplyRequest last_multiply_;
  matserve::v1::MultiplyBatchedRequest last_multiply_batched_;
  int multiply_batched_calls_ = 0;
  std::map<std::string, matserve::v1::Matrix> resident_;
  int next_handle_ = 1;
  int multiply_calls_ = 0;
  int upload_stream_chunks_ = 0;
  int download_stream_chunks_ = 0;
  bool ranged_ = false;
  std::string replica_id_;
  int upload_calls_ = 0;
  int write_range_calls_ = 0;
  int create_resident_calls_ = 0;
  std::vector<std::string> create_devices_;
  std::map<std::string, std::string> devices_;  // where CreateResident placed each matrix
};

// The fake service listening on 127.0.0.1 at a free port, with 1 GiB message limits.
class FakeServer {
 public:
  FakeServer();
  ~FakeServer();
  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }
  FakeMatrixService& service() { return service_; }

 private:
  FakeMatrixService service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace matserve::client::testing
