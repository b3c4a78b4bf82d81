// API <-> internal type conversions: see proto_convert.h.
#include "server/service/proto_convert.h"

#include <cstddef>
#include <cstdint>

namespace matserve::server {

std::optional<kernels::DType> from_proto(v1::DataType t) {
  switch (t) {
    case v1::FP64: return kernels::DType::kF64;
    case v1::FP32: return kernels::DType::kF32;
    case v1::FP16: return kernels::DType::kF16;
    case v1::BF16: return kernels::DType::kBF16;
    case v1::FP8_E4M3: return kernels::DType::kF8E4M3;
    default: return std::nullopt;
  }
}

v1::DataType to_proto(kernels::DType t) {
  switch (t) {
    case kernels::DType::kF64: return v1::FP64;
    case kernels::DType::kF32: return v1::FP32;
    case kernels::DType::kF16: return v1::FP16;
    case kernels::DType::kBF16: return v1::BF16;
    case kernels::DType::kF8E4M3: return v1::FP8_E4M3;
  }
  return v1::DATA_TYPE_UNSPECIFIED;
}

std::optional<kernels::Layout> from_proto(v1::Layout l) {
  switch (l) {
    case v1::ROW_MAJOR: return kernels::Layout::kRowMajor;
    case v1::COL_MAJOR: return kernels::Layout::kColMajor;
    default: return std::nullopt;
  }
}

std::optional<kernels::Compute> from_proto(v1::ComputeMode c) {
  switch (c) {
    case v1::COMPUTE_DEFAULT: return kernels::Compute::kDefault;
    case v1::COMPUTE_FP64: return kernels::Compute::kF64;
    case v1::COMPUTE_FP32: return kernels::Compute::kF32;
    case v1::COMPUTE_TF32: return kernels::Compute::kTF32;
    case v1::COMPUTE_FP16: return kernels::Compute::kF16;
    case v1::COMPUTE_BF16: return kernels::Compute::kBF16;
    case v1::COMPUTE_FP8: return kernels::Compute::kF8;
    default: return std::nullopt;
  }
}

void fill_timing(const StageTimes& t, v1::Timing* out) {
  out->set_queue_us(t.queue_us);
  out->set_host_to_device_us(t.host_to_device_us);
  out->set_kernel_us(t.kernel_us);
  out->set_launch_us(t.launch_us);
  out->set_device_to_host_us(t.device_to_host_us);
  out->set_total_us(t.total_us);
  out->set_batch_wait_us(t.batch_wait_us);
}

void fill_verification(const kernels::ErrorStats& e, v1::Verification* out) {
  out->set_max_abs_error(e.max_abs_error);
  out->set_rel_l2_error(e.rel_l2_error);
}

void fill_device(const DeviceDescription& d, v1::DeviceInfo* out) {
  out->set_index(d.index);
  out->set_name(d.name);
  out->set_compute_capability(d.compute_capability);
  out->set_memory_total_bytes(d.memory_total_bytes);
  out->set_memory_free_bytes(d.memory_free_bytes);
  out->set_multiprocessors(d.multiprocessors);
}

std::optional<Fp8ScalePair> fp8_scales_used(kernels::DType data, Fp8ScalePair given,
                                            const Outcome& outcome, std::int64_t i) {
  if (data == kernels::DType::kF8E4M3) return given;
  const auto at = static_cast<std::size_t>(2 * i);
  if (i < 0 || at + 1 >= outcome.fp8_scales.size()) return std::nullopt;
  return Fp8ScalePair{outcome.fp8_scales[at], outcome.fp8_scales[at + 1]};
}

}  // namespace matserve::server
