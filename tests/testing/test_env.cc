#include "tests/testing/test_env.h"

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace zoom::testing {

std::string TestDataDir() {
  if (const char* env = std::getenv("ZOOM_TEST_DATA")) return env;
  return std::string(ZOOM_SOURCE_DIR) + "/tests/data";
}

std::string TestDataPath(const std::string& relative) {
  return TestDataDir() + "/" + relative;
}

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base ? base : "/var/tmp") + "/zoomtest.XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) {
    throw std::runtime_error("mkdtemp failed for " + tmpl);
  }
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace zoom::testing
