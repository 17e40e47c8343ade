// File: server/engine/decoder_engine.h
//
// DecoderEngine: the loaded language models of the FGD service, each a
// softmax layer read from a model directory with its FgdIndex.
//
// Model directories live under one root, DecoderOptions::models_dir (the
// server's --models_dir); a client names one by a relative name ("ptb",
// "lm/ptb-v2"), never by a path. Files are opened through ConfinedDir
// (common/confined_dir.h): nothing outside the root is read, symlinks
// leading out are refused, only regular files are opened (O_NONBLOCK), and
// error messages name files relative to the root.
//
// Model directory (see docs/decoder.md):
//   meta.json   {"vocab_size": V, "dim": d, ...}  ("V" and "d" also accepted)
//   W.f32       V × d float32, row-major (or W.f16: float16, widened here)
//   b.f32       V float32
//   vocab.txt   V lines, line i = the word of id i
//   H.f32       optional: N × d float32 contexts like the ones the model will
//               decode (e.g. the LM's hidden states on held-out text); the
//               model's default ef is calibrated on them (CalibrateDefaultEf)
// Sizes are checked against meta.json before anything is allocated; a
// mismatch is InvalidArgument naming the file, the expected and the actual
// size. A model whose estimated memory would pass the budget is refused
// (ResourceExhausted) before it is read.
//
// Graph cache: a built graph is saved under CACHE_DIR/<name>-<fingerprint>.zfgd
// (the fingerprint covers the files' sizes and mtimes and the HNSW options),
// so a restart or a reload loads it instead of rebuilding.
//
// Loading: a fixed set of loader threads (joined at destruction) works
// through queued loads; a load is cancelled by Unload (queued or running)
// and by the engine's destruction. A failed load stays listed (FAILED, with
// its error) until a new Load of the name replaces it (or the caller that
// waited for it unloads it, as LoadModel with wait does); it counts against
// no limit. Allocation failure in a load is its FAILED state, never a
// process exit.
//
// Thread safety: all methods are safe from many threads. Searches use a
// shared_ptr to the model.
#ifndef ZOOM_SERVER_ENGINE_DECODER_ENGINE_H_
#define ZOOM_SERVER_ENGINE_DECODER_ENGINE_H_

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/confined_dir.h"
#include "index/fgd_index.h"

namespace zoom::server {

// A softmax layer read from a model directory.
struct SoftmaxModel {
  uint32_t vocab = 0, dim = 0;
  std::vector<float> W;  // vocab × dim
  std::vector<float> b;  // vocab
  std::vector<std::string> words;
};

// Reads and validates model directory `name` under `root` (see the file
// comment). NotFound for a missing directory or file; InvalidArgument for
// a bad name, malformed or mismatched files; PermissionDenied for a path
// that resolves outside the root; Cancelled when *cancel turns true (may be
// null). `admit` (may be empty) is called with EstimateModelBytes once the
// sizes are checked and before anything big is allocated; its error (e.g.
// ResourceExhausted for the memory budget) ends the read.
absl::StatusOr<SoftmaxModel> ReadModelDir(
    const ConfinedDir& root, const std::string& name,
    const std::function<absl::Status(uint64_t)>& admit = nullptr,
    const std::atomic<bool>* cancel = nullptr);
// For trusted local callers (benchmarks, tools): the model directory at
// `path`, read with the same checks (its parent directory is the root).
absl::StatusOr<SoftmaxModel> ReadModelDirAt(const std::string& path);
// RAM a loaded model of V words of d dims takes, about: the file data while
// loading, the transformed rows, the graph (M links per word) and the words.
uint64_t EstimateModelBytes(uint64_t vocab, uint64_t dim, uint64_t vocab_file_bytes, uint32_t m);
// IEEE 754 binary16 -> float.
float HalfToFloat(uint16_t h);

// The default ef of a model, measured on contexts (CalibrateDefaultEf).
struct FgdCalibration {
  uint32_t ef = 0;        // 0: no ef of the grid reached the targets
  uint32_t contexts = 0;  // contexts measured
  double p1 = 0, p5 = 0;  // mean precision@1 and @5 at ef (ef 0: at the largest tried)
};
// The targets of the default ef: P@1 ≥ 0.99 and P@5 ≥ 0.98 (issue 19's).
inline constexpr double kDefaultEfP1 = 0.99, kDefaultEfP5 = 0.98;
// The ef grid CalibrateDefaultEf tries, ascending.
inline constexpr uint32_t kDefaultEfGrid[] = {10,  12,  16,  20,  24,  32,  40, 48,
                                              64,  96,  128, 192, 256, 384, 512};
// Measures the graph's precision@1 and @5 against the exact softmax on up to
// `max_contexts` of the n contexts (n × index.dim() floats; evenly spaced)
// at the grid's ef values, smallest first, and returns the first that
// reaches both targets. An id counts as correct when its exact logit is at
// least the k-th exact logit − 1e-4 (near-ties are not misses).
// InvalidArgument naming the context for one that is not finite or past the
// magnitude limit (common/vector_limits.h); Cancelled when *cancel turns
// true (may be null). Work: one exact pass (sgemm) and ≤ 15 graph passes
// over the sample, one thread.
absl::StatusOr<FgdCalibration> CalibrateDefaultEf(const index::FgdIndex& index,
                                                  const float* contexts, size_t n,
                                                  const std::atomic<bool>* cancel = nullptr,
                                                  uint32_t max_contexts = 500);
// The ef a TopK with ef 0 runs at for k words, given the model's default ef
// (0: the built-in max(64, k)): default_ef for k ≤ 5, default_ef · k / 5
// above (the graph's list grows with the words asked for), never below k.
uint32_t DefaultEfFor(uint32_t default_ef, uint32_t k);

enum class ModelState { kLoading = 1, kServing = 2, kFailed = 3 };

struct LoadedModel {
  std::string name, dir;  // dir: relative to the models directory
  uint32_t vocab = 0, dim = 0;
  index::FgdOptions options;
  std::atomic<ModelState> state{ModelState::kLoading};
  std::atomic<double> progress{0};
  std::atomic<bool> cancel{false};  // Unload or shutdown: stop the load
  bool graph_from_cache = false;
  std::string error;  // set before state turns kFailed
  absl::StatusCode error_code = absl::StatusCode::kOk;
  uint64_t reserved_bytes = 0;  // of the memory budget (engine's mutex)
  std::vector<std::string> words;
  std::unique_ptr<index::FgdIndex> index;  // set before state turns kServing
  // The default ef (DefaultEfFor), set before state turns kServing (the
  // requested one at Load): from the request, calibrated on the directory's
  // H.f32, or 0 (built-in; calibration_error says why).
  uint32_t default_ef = 0;
  enum class EfSource { kBuiltin, kRequest, kCalibrated } default_ef_source = EfSource::kBuiltin;
  FgdCalibration calibration;     // when H.f32 was measured
  std::string calibration_error;  // why no calibrated default (none asked for)
};

// What one TopK call may ask for (the server's limits).
struct DecodeLimits {
  uint32_t max_k = 1000;
  uint32_t max_contexts = 4096;  // per request / stream message
  uint32_t max_ef = 10000;
};

// One decode step: contexts (each dim floats) against a model.
struct TopKRequest {
  std::string model;
  std::vector<absl::Span<const float>> contexts;
  uint32_t k = 0;             // 1..min(limits.max_k, |V|)
  uint32_t ef = 0;            // 0: the model's (DefaultEfFor)
  bool exact = false;         // full softmax
  uint32_t tail_samples = 0;  // kSample: words sampled (0: 256)
  // kDefault: kClusters, or kSample when tail_samples > 0.
  enum class Tail { kDefault, kClusters, kSample, kNone } tail = Tail::kDefault;
  bool with_probs = false;
  bool with_words = false;
};

// The call around it: work stops at the deadline (DeadlineExceeded) or
// when *cancelled turns true (Cancelled), checked between chunks of
// contexts.
struct CallContext {
  absl::Time deadline = absl::InfiniteFuture();
  const std::atomic<bool>* cancelled = nullptr;
};

struct TopKAnswer {
  std::vector<uint32_t> ids;  // best logit first
  std::vector<float> logits;
  std::vector<float> probs;        // when asked
  std::vector<std::string> words;  // when asked
  float tail_mass = 0;
  uint64_t micros = 0;  // the step's time per context
  uint64_t distance_evals = 0;
  uint32_t ef = 0;  // the graph's ef (0: exact)
};

struct TopKStats {
  size_t contexts = 0;
  uint64_t distance_evals = 0;
  bool exact = false;
  double seconds = 0;
};

// InvalidArgument unless `name` is 1..64 characters of [A-Za-z0-9_-] (a
// model's name; the message echoes at most 64 bytes of it).
absl::Status ValidateModelName(const std::string& name);

// What a load of `name` from `dir` with `options` and `default_ef` must
// pass before anything is read, with `limits`: the name, the graph's
// options, default_ef within max_ef, a directory given and confined (no
// "..", no absolute path). A cluster's router checks a model with it
// before recording it (every node would refuse it alike).
absl::Status ValidateLoadRequest(const std::string& name, const std::string& dir,
                                 const index::FgdOptions& options, uint32_t default_ef,
                                 const DecodeLimits& limits);

struct DecoderOptions {
  DecodeLimits limits;
  std::string cache_dir;   // "" = no graph cache
  std::string models_dir;  // "" = loading models is off (FailedPrecondition)
  int build_threads = 2;
  int loader_threads = 1;
  // Models loading or serving at once (ResourceExhausted beyond).
  uint32_t max_models = 16;
  // Estimated bytes of the models loading or serving (ResourceExhausted
  // before a load that would pass it reads anything big).
  uint64_t max_model_bytes = uint64_t{4} << 30;
};

class DecoderEngine {
 public:
  explicit DecoderEngine(const DecoderOptions& options);
  ~DecoderEngine();  // cancels and joins the loads in progress

  // Queues loading directory `dir` (a name under models_dir) as `name`.
  // AlreadyExists if the name is loading or serving (unload first; a FAILED
  // one is replaced); InvalidArgument for a bad name, dir or options;
  // FailedPrecondition without a models_dir; ResourceExhausted past
  // max_models. The files are read and checked in the background; Wait()
  // or GetServing() see the result. default_ef: the model's (≤
  // limits.max_ef); 0 calibrates it from the directory's H.f32 when there
  // is one (a bad H.f32 is a warning in calibration_error, not a failed
  // load), else leaves the built-in.
  absl::StatusOr<std::shared_ptr<LoadedModel>> Load(const std::string& name,
                                                    const std::string& dir,
                                                    const index::FgdOptions& options,
                                                    uint32_t default_ef = 0);
  // Blocks until the model is no longer loading; its error (with the
  // load's own code) if it failed or was cancelled.
  absl::Status Wait(const std::shared_ptr<LoadedModel>& model) const;
  // Calls done(status) once the model is no longer loading (at once if it
  // is not): on the loader thread, or on the caller's. Never blocks.
  void WhenLoaded(const std::shared_ptr<LoadedModel>& model,
                  std::function<void(absl::Status)> done) const;
  // Removes the model; a load in progress is cancelled. NotFound if absent
  // (or, when `only` is set, if the name now holds another model).
  absl::Status Unload(const std::string& name, const LoadedModel* only = nullptr);
  // NotFound if absent; Unavailable while loading; FailedPrecondition when
  // failed.
  absl::StatusOr<std::shared_ptr<LoadedModel>> GetServing(const std::string& name) const;
  std::vector<std::shared_ptr<LoadedModel>> List() const;

  // The decode step, validated here (InvalidArgument naming the context or
  // the knob to fix), on the caller's thread: one answer per context, in
  // order. Errors of GetServing for the model.
  absl::Status TopK(const TopKRequest& request, const CallContext& call,
                    std::vector<TopKAnswer>* answers, TopKStats* stats) const;

 private:
  void LoaderMain();
  void LoadMain(const std::shared_ptr<LoadedModel>& model);
  // Sets the model's default ef from its directory's H.f32 (LoadMain).
  void CalibrateModel(LoadedModel* model) const;
  void Finish(const std::shared_ptr<LoadedModel>& model, const absl::Status& st);
  static absl::Status StatusOf(const LoadedModel& model);

  DecoderOptions options_;
  std::unique_ptr<ConfinedDir> root_;  // null without models_dir (or if it cannot be opened)
  std::string root_error_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<LoadedModel>> models_ ABSL_GUARDED_BY(mu_);
  std::deque<std::shared_ptr<LoadedModel>> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t reserved_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Callbacks waiting for a model's load to end.
  mutable std::multimap<const LoadedModel*, std::function<void(absl::Status)>> waiters_
      ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> loaders_;
};

}  // namespace zoom::server

#endif  // ZOOM_SERVER_ENGINE_DECODER_ENGINE_H_
