// The server's device label for each GPU it uses, by UUID ("GPU-xxxxxxxx-..." -> "cuda:0"), so
// that NVML's readings (indexed in NVML's own order) carry the same `device` label as requests.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace matserve::server {

// UUIDs of the given CUDA ordinals, written as NVML writes them (lowercase hex, 8-4-4-4-12 after
// "GPU-"), mapped to "cuda:<ordinal>". Empty in a build without CUDA; an ordinal CUDA cannot
// describe is left out.
std::map<std::string, std::string> cuda_device_labels(const std::vector<int>& ordinals);

// "GPU-" and 16 bytes as 8-4-4-4-12 lowercase hex groups.
std::string format_gpu_uuid(const unsigned char (&bytes)[16]);

}  // namespace matserve::server
