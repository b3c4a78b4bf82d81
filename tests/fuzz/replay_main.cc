// A plain driver for the fuzz target, for builds without libFuzzer: runs LLVMFuzzerTestOneInput on
// every file named (directories are walked), so the seed corpus and the regression inputs (past
// findings) run as an ordinary test under any compiler.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

int run_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  int files = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path arg(argv[i]);
    if (std::filesystem::is_directory(arg)) {
      std::vector<std::filesystem::path> all;
      for (const auto& e : std::filesystem::recursive_directory_iterator(arg)) {
        if (e.is_regular_file()) all.push_back(e.path());
      }
      for (const auto& p : all) files += run_file(p);
    } else {
      files += run_file(arg);
    }
  }
  std::printf("request_fuzz_replay: %d inputs ran without a finding\n", files);
  return files > 0 ? 0 : 1;
}
