// File: tests/testing/test_env.h
//
// Paths for tests: the shipped data folder (tests/data, via ZOOM_TEST_DATA
// set by ctest) and a fresh temporary directory per test, removed after.
#ifndef ZOOM_TESTS_TESTING_TEST_ENV_H_
#define ZOOM_TESTS_TESTING_TEST_ENV_H_

#include <string>

namespace zoom::testing {

// tests/data (absolute), from $ZOOM_TEST_DATA or the source tree.
std::string TestDataDir();
// TestDataDir() + "/" + relative.
std::string TestDataPath(const std::string& relative);

// A directory created on construction under $TMPDIR (or /var/tmp, which is
// a real disk where /tmp may be tmpfs) and removed with its contents on
// destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace zoom::testing

#endif  // ZOOM_TESTS_TESTING_TEST_ENV_H_
