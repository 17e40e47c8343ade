// File: server/engine/decoder_engine.h
//
// DecoderEngine: the loaded language models of the FGD service, each a
// softmax layer read from a model directory with its FgdIndex.
//
// Model directory (see README, "FGD decoder"):
//   meta.json   {"vocab_size": V, "dim": d, ...}  ("V" and "d" also accepted)
//   W.f32       V × d float32, row-major (or W.f16: float16, widened here)
//   b.f32       V float32
//   vocab.txt   V lines, line i = the word of id i
// Sizes are checked against meta.json; a mismatch is InvalidArgument naming
// the file, the expected and the actual size.
//
// Graph cache: a built graph is saved under CACHE_DIR/<name>-<fingerprint>.zfgd
// (the fingerprint covers the files' sizes and mtimes and the HNSW options),
// so a restart or a reload loads it instead of rebuilding.
//
// Thread safety: all methods are safe from many threads. Loading runs in a
// background thread per model; searches use a shared_ptr to the model.
#ifndef ZOOM_SERVER_ENGINE_DECODER_ENGINE_H_
#define ZOOM_SERVER_ENGINE_DECODER_ENGINE_H_

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "index/fgd_index.h"

namespace zoom::server {

// A softmax layer read from a model directory.
struct SoftmaxModel {
  uint32_t vocab = 0, dim = 0;
  std::vector<float> W;  // vocab × dim
  std::vector<float> b;  // vocab
  std::vector<std::string> words;
};
// Reads and validates a model directory (see the file comment).
absl::StatusOr<SoftmaxModel> ReadModelDir(const std::string& dir);
// IEEE 754 binary16 -> float.
float HalfToFloat(uint16_t h);

enum class ModelState { kLoading = 1, kServing = 2, kFailed = 3 };

struct LoadedModel {
  std::string name, dir;
  uint32_t vocab = 0, dim = 0;
  index::FgdOptions options;
  std::atomic<ModelState> state{ModelState::kLoading};
  std::atomic<double> progress{0};
  bool graph_from_cache = false;
  std::string error;  // set before state turns kFailed
  std::vector<std::string> words;
  std::unique_ptr<index::FgdIndex> index;  // set before state turns kServing
};

struct DecoderOptions {
  std::string cache_dir;  // "" = no graph cache
  int build_threads = 2;
};

class DecoderEngine {
 public:
  explicit DecoderEngine(const DecoderOptions& options);
  ~DecoderEngine();  // waits for loads in progress

  // Starts loading `dir` as `name`. AlreadyExists if the name is taken
  // (unload first); InvalidArgument for a bad name or options. The files
  // are read and checked in the background; Wait() or Get() see the result.
  absl::StatusOr<std::shared_ptr<LoadedModel>> Load(const std::string& name,
                                                    const std::string& dir,
                                                    const index::FgdOptions& options);
  // Blocks until the model is no longer loading; its error if it failed.
  absl::Status Wait(const std::shared_ptr<LoadedModel>& model) const;
  absl::Status Unload(const std::string& name);
  // NotFound if absent; FailedPrecondition while loading or failed.
  absl::StatusOr<std::shared_ptr<LoadedModel>> GetServing(const std::string& name) const;
  std::vector<std::shared_ptr<LoadedModel>> List() const;

 private:
  void LoadMain(std::shared_ptr<LoadedModel> model);

  DecoderOptions options_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<LoadedModel>> models_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> loaders_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zoom::server

#endif  // ZOOM_SERVER_ENGINE_DECODER_ENGINE_H_
