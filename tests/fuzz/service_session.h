// A fuzz input as a sequence of calls on the in-process server (service_harness.h): Multiply and
// Transpose (inline or naming resident handles, keep_result, in_place), Upload, a whole
// UploadStream, Download, DownloadStream, Release, ListResident, GetServerInfo, ListKernels, by
// four callers. Every reply and status is checked (service_model.h); at the end everything the
// input left resident is released and the server must be back to zero resident bytes.
//
// Input (after the fuzz target's selector byte): repeated
//   [op] [len lo] [len hi] [len bytes: payload]
// op & 0x0f picks the call: 0 Multiply, 1 Transpose, 2 Upload, 3 UploadStream, 4 Download,
// 5 DownloadStream, 6 Release, 7 ListResident, 8 GetServerInfo, 9 ListKernels, 10-13 Multiply,
// Transpose, UploadStream, DownloadStream again, 14-15 UploadStream, DownloadStream over real
// gRPC (in process). op >> 4 picks the caller: 0-9 alice, 10-12 bob (both hold every
// permission), 13-14 carol (compute only), 15 no token. The payload is the request message, for
// UploadStream repeated [len lo][len hi][UploadChunk]. A handle field of one byte names the
// session's (byte % count)-th handle seen so far (released ones included).
//
// With shared memory (`with_shm`, service_shm.h), op codes 10-13 are instead
// RegisterSharedMemory, UnregisterSharedMemory, ListSharedMemory and a resize of one of the
// session's objects behind the server's back, and a one-byte `shm.region` / `output_shm.region`
// in Multiply and Transpose names a region registered this session; what the input left
// registered is unregistered at the end and nothing may remain listed.
#pragma once

#include <cstddef>
#include <cstdint>

namespace matserve::fuzz {

void fuzz_service_session(const std::uint8_t* data, std::size_t size, bool with_shm);

}  // namespace matserve::fuzz
