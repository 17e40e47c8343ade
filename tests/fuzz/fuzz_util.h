// File: tests/fuzz/fuzz_util.h
//
// Helpers of the libFuzzer targets: a scratch directory (in memory when
// /dev/shm exists) made once per process, files written from the input,
// and a cursor that splits the input into parts.
#ifndef ZOOM_TESTS_FUZZ_FUZZ_UTIL_H_
#define ZOOM_TESTS_FUZZ_FUZZ_UTIL_H_

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace zoom::fuzz {

inline const std::string& ScratchDir() {
  // Never destroyed: the atexit handler runs after static destructors.
  static const std::string* dir = [] {
    const char* base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp";
    auto* path = new std::string(std::string(base) + "/zoomfuzz.XXXXXX");
    if (mkdtemp(path->data()) == nullptr) std::abort();
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(*dir, ec);
    });
    return path;
  }();
  return *dir;
}

inline std::string WriteScratch(const std::string& name, std::string_view bytes) {
  const std::string path = ScratchDir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

// Splits the input into parts separated by the 4 bytes "\xffZS\xff" (seeds
// are written the same way), and takes small numbers off the front.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size)
      : rest_(reinterpret_cast<const char*>(data), size) {}
  uint8_t Byte() {
    if (rest_.empty()) return 0;
    const uint8_t b = static_cast<uint8_t>(rest_[0]);
    rest_.remove_prefix(1);
    return b;
  }
  std::string_view Part() {
    static constexpr std::string_view kSep("\xffZS\xff", 4);
    const size_t at = rest_.find(kSep);
    std::string_view part = rest_.substr(0, at);
    rest_ = at == std::string_view::npos ? std::string_view() : rest_.substr(at + kSep.size());
    return part;
  }
  std::string_view Rest() const { return rest_; }

 private:
  std::string_view rest_;
};

inline std::string Join(std::initializer_list<std::string_view> parts) {
  std::string out;
  bool first = true;
  for (std::string_view p : parts) {
    if (!first) out.append("\xffZS\xff", 4);
    out.append(p.data(), p.size());
    first = false;
  }
  return out;
}

// ZOOM_FUZZ_WRITE_SEEDS=DIR: the targets that generate their seeds write
// them there at start (then run as usual).
inline void MaybeWriteSeed(const std::string& name, std::string_view bytes) {
  const char* dir = std::getenv("ZOOM_FUZZ_WRITE_SEEDS");
  if (dir == nullptr) return;
  std::filesystem::create_directories(dir);
  std::ofstream out(std::string(dir) + "/" + name, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace zoom::fuzz

#endif  // ZOOM_TESTS_FUZZ_FUZZ_UTIL_H_
