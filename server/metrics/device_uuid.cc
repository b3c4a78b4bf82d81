// CUDA device UUIDs for the GPU metrics' labels: see device_uuid.h.
#include "server/metrics/device_uuid.h"

#include <cstring>

#ifdef MATSERVE_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace matserve::server {

std::string format_gpu_uuid(const unsigned char (&bytes)[16]) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out.push_back('-');
    out.push_back(kHex[bytes[i] >> 4]);
    out.push_back(kHex[bytes[i] & 15]);
  }
  return out;
}

std::map<std::string, std::string> cuda_device_labels(const std::vector<int>& ordinals) {
  std::map<std::string, std::string> out;
#ifdef MATSERVE_HAVE_CUDA
  for (int ordinal : ordinals) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, ordinal) != cudaSuccess) continue;
    unsigned char bytes[16];
    std::memcpy(bytes, prop.uuid.bytes, sizeof(bytes));
    out[format_gpu_uuid(bytes)] = "cuda:" + std::to_string(ordinal);
  }
#else
  (void)ordinals;
#endif
  return out;
}

}  // namespace matserve::server
