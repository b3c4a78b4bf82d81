// A scratch directory owned by the running test: ctest runs every test as its own process, in
// parallel, so a fixed name under ::testing::TempDir() is shared by tests that run at once (one
// writes the file another is reading). The directory is named after the test and the process and
// removed, with what is in it, when the object goes away.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

#include "gtest/gtest.h"

namespace matserve::testing {

class TestTempDir {
 public:
  TestTempDir() {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = info == nullptr ? std::string("no_test")
                                       : std::string(info->test_suite_name()) + "." + info->name();
    for (char& c : name) {
      if (c == '/') c = '_';  // parameterized names contain '/'
    }
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("matserve_" + name + "_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  ~TestTempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  TestTempDir(const TestTempDir&) = delete;
  TestTempDir& operator=(const TestTempDir&) = delete;

  // A path for `file` inside this test's directory.
  std::string path(const std::string& file) const { return (dir_ / file).string(); }

 private:
  std::filesystem::path dir_;
};

}  // namespace matserve::testing
