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

// Rewrites `path`'s trailing CRC-32C (common/binary_io.h's framing) over what
// precedes it: after a test changed a field, the file a newer zoomd would
// have written, its checksum right. False if it cannot.
bool RecomputeTrailingCrc(const std::string& path);

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

// A loopback TCP port on which nothing listens, for as long as the object
// lives: bound (so no other process can take it) but never listen()ed, so
// a connection to it is refused at once. Use instead of a fixed port.
//
// shareable: the socket has SO_REUSEADDR, so that a server that also binds
// with it (nats-server, as every Go server) can listen on the port while
// the object keeps any other process's bind or ephemeral port off it: a
// port reserved for a child process, known before it starts.
class RefusedPort {
 public:
  explicit RefusedPort(bool shareable = false);
  ~RefusedPort();
  RefusedPort(const RefusedPort&) = delete;
  RefusedPort& operator=(const RefusedPort&) = delete;
  int port() const { return port_; }
  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace zoom::testing

#endif  // ZOOM_TESTS_TESTING_TEST_ENV_H_
