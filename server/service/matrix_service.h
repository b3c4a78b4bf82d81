// gRPC handlers of matserve.v1.MatrixService: decode and validate, hand the job to the runtime,
// encode the reply, map errors to gRPC status, and report every request to the metrics.
#pragma once

#include <string>

#include "matserve/v1/matrix_service.grpc.pb.h"
#include "server/metrics/metrics.h"
#include "server/runtime/runtime.h"
#include "server/service/limits.h"

namespace matserve::server {

class MatrixServiceImpl final : public v1::MatrixService::Service {
 public:
  MatrixServiceImpl(Runtime& runtime, Metrics& metrics, const ServiceLimits& limits);

  grpc::Status Multiply(grpc::ServerContext* context, const v1::MultiplyRequest* request,
                        v1::MultiplyReply* reply) override;
  grpc::Status Transpose(grpc::ServerContext* context, const v1::TransposeRequest* request,
                         v1::TransposeReply* reply) override;
  grpc::Status ListKernels(grpc::ServerContext* context, const v1::ListKernelsRequest* request,
                           v1::ListKernelsReply* reply) override;
  grpc::Status GetServerInfo(grpc::ServerContext* context, const v1::GetServerInfoRequest* request,
                             v1::GetServerInfoReply* reply) override;

 private:
  Runtime& runtime_;
  Metrics& metrics_;
  ServiceLimits limits_;
};

}  // namespace matserve::server
