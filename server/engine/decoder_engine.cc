#include "server/engine/decoder_engine.h"

#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/echo.h"
#include "common/json.h"
#include "common/logging.h"
#include "common/process.h"
#include "common/status_macros.h"
#include "common/timer.h"
#include "common/vector_limits.h"

namespace zoom::server {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kMaxMetaBytes = 64 << 10;
constexpr uint64_t kMaxVocab = uint64_t{1} << 26;
constexpr uint64_t kMaxDim = 65536;
constexpr uint32_t kMaxFailedEntries = 64;

absl::Status CheckSize(const ConfinedFile& f, uint64_t expected, const char* what) {
  if (f.size() != expected) {
    return absl::InvalidArgumentError(absl::StrCat("model file ", f.name(), " has ", f.size(),
                                                   " bytes; ", what, " needs ", expected));
  }
  return absl::OkStatus();
}

absl::Status CheckCancel(const std::atomic<bool>* cancel) {
  if (cancel != nullptr && cancel->load(std::memory_order_relaxed)) {
    return absl::CancelledError("the load was cancelled (unloaded, or the server stopped)");
  }
  return absl::OkStatus();
}


std::string Fingerprint(const ConfinedDir& root, const std::string& dir,
                        const index::FgdOptions& o) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t v) {
    h ^= v;
    h *= 1099511628211ull;
  };
  for (const char* f : {"W.f32", "W.f16", "b.f32", "meta.json"}) {
    struct stat st;
    const std::string path = (fs::path(root.root()) / dir / f).string();
    if (stat(path.c_str(), &st) == 0) {
      mix(static_cast<uint64_t>(st.st_size));
      mix(static_cast<uint64_t>(st.st_mtim.tv_sec));
      mix(static_cast<uint64_t>(st.st_mtim.tv_nsec));
    }
  }
  mix(o.hnsw.M);
  mix(o.hnsw.ef_construction);
  mix(o.hnsw.seed);
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// Contexts read from H.f32 for the calibration: at most this many bytes (the
// file's first rows).
constexpr uint64_t kMaxCalibrationBytes = 16 << 20;

}  // namespace

// A name like collection names: 1..64 of [A-Za-z0-9_-]; the message echoes
// at most 64 bytes and names a bad byte by its hex value when it is not
// printable ASCII.
absl::Status ValidateModelName(const std::string& name) {
  if (name.empty() || name.size() > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model name must be 1..64 characters of [A-Za-z0-9_-], got ",
        name.empty() ? std::string("an empty one") : absl::StrCat("'", EchoForMessage(name), "'")));
  }
  for (size_t i = 0; i < name.size(); ++i) {
    const unsigned char u = static_cast<unsigned char>(name[i]);
    if (!(std::isalnum(u) || u == '_' || u == '-')) {
      return absl::InvalidArgumentError(absl::StrCat("model name '", EchoForMessage(name),
                                                     "' has the character ",
                                                     DescribeCharAt(name, i),
                                                     "; use only [A-Za-z0-9_-]"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<FgdCalibration> CalibrateDefaultEf(const index::FgdIndex& index,
                                                  const float* contexts, size_t n,
                                                  const std::atomic<bool>* cancel,
                                                  uint32_t max_contexts) {
  const uint32_t d = index.dim();
  constexpr uint32_t kK = 5;
  if (index.vocab_size() < kK) {
    return absl::InvalidArgumentError(
        absl::StrCat("the model has ", index.vocab_size(), " words; calibrating needs ", kK));
  }
  const size_t q = std::min<size_t>(n, std::max<uint32_t>(1, max_contexts));
  if (q == 0) return absl::InvalidArgumentError("no contexts to calibrate on");
  std::vector<float> h(q * d);
  for (size_t i = 0; i < q; ++i) {
    const size_t src = i * n / q;  // evenly spaced
    if (absl::Status st = CheckVectorMagnitude(Metric::kL2, contexts + src * d, d); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("context #", src, ": ", st.message()));
    }
    std::copy_n(contexts + src * d, d, h.begin() + i * d);
  }
  constexpr size_t kChunk = 64;
  auto run = [&](const index::FgdSearchParams& p, std::vector<index::FgdResult>* out) {
    out->clear();
    std::vector<index::FgdResult> part;
    for (size_t first = 0; first < q; first += kChunk) {
      ZOOM_RETURN_IF_ERROR(CheckCancel(cancel));
      ZOOM_RETURN_IF_ERROR(
          index.Search(h.data() + first * d, std::min(kChunk, q - first), p, &part));
      for (auto& r : part) out->push_back(std::move(r));
    }
    return absl::OkStatus();
  };
  index::FgdSearchParams p;
  p.k = kK;
  p.tail = index::FgdTail::kNone;
  p.exact = true;
  std::vector<index::FgdResult> exact, graph;
  ZOOM_RETURN_IF_ERROR(run(p, &exact));
  constexpr float kTolerance = 1e-4f;
  p.exact = false;
  FgdCalibration out;
  out.contexts = static_cast<uint32_t>(q);
  for (uint32_t ef : kDefaultEfGrid) {
    p.ef = ef;
    ZOOM_RETURN_IF_ERROR(run(p, &graph));
    double p1 = 0, p5 = 0;
    for (size_t i = 0; i < q; ++i) {
      const std::vector<float>& z = exact[i].logits;
      const index::FgdResult& g = graph[i];
      // The graph's logits are w·h + b recomputed for the ids it returns.
      if (!g.logits.empty() && g.logits[0] >= z[0] - kTolerance) p1 += 1;
      for (size_t t = 0; t < g.logits.size() && t < kK; ++t) {
        if (g.logits[t] >= z[kK - 1] - kTolerance) p5 += 1.0 / kK;
      }
    }
    out.p1 = p1 / static_cast<double>(q);
    out.p5 = p5 / static_cast<double>(q);
    if (out.p1 >= kDefaultEfP1 && out.p5 >= kDefaultEfP5) {
      out.ef = ef;
      break;
    }
  }
  return out;
}

uint32_t DefaultEfFor(uint32_t default_ef, uint32_t k) {
  if (default_ef == 0) return std::max<uint32_t>(64, k);
  const uint64_t ef = k <= 5 ? default_ef : uint64_t{default_ef} * k / 5;
  return static_cast<uint32_t>(std::max<uint64_t>(k, std::min<uint64_t>(ef, UINT32_MAX)));
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -24);  // subnormal or zero
  } else if (exp == 31) {
    v = mant == 0 ? INFINITY : NAN;
  } else {
    v = std::ldexp(static_cast<float>(mant | 0x400), static_cast<int>(exp) - 25);
  }
  return sign ? -v : v;
}

uint64_t EstimateModelBytes(uint64_t vocab, uint64_t dim, uint64_t vocab_file_bytes, uint32_t m) {
  const uint64_t w = vocab * dim * 4;            // W while loading
  const uint64_t rows = vocab * (dim + 2) * 4;   // the transformed rows
  const uint64_t graph = vocab * (2 * uint64_t{m} + 2) * 4 * 5 / 4;  // level 0 and some upper
  const uint64_t words = vocab_file_bytes + vocab * 32;
  return w + rows + graph + words;
}

absl::StatusOr<SoftmaxModel> ReadModelDir(const ConfinedDir& root, const std::string& name,
                                          const std::function<absl::Status(uint64_t)>& admit,
                                          const std::atomic<bool>* cancel) {
  ZOOM_RETURN_IF_ERROR(ConfinedDir::ValidateName(name, "model directory"));
  ZOOM_RETURN_IF_ERROR(root.CheckDirectory(name, "model directory"));
  const std::string prefix = name + "/";
  ZOOM_ASSIGN_OR_RETURN(ConfinedFile meta_file, root.OpenFile(prefix + "meta.json"));
  ZOOM_ASSIGN_OR_RETURN(std::string meta, meta_file.ReadToString(kMaxMetaBytes));
  std::optional<uint64_t> vocab_field = JsonUintField(meta, "vocab_size");
  if (!vocab_field) vocab_field = JsonUintField(meta, "V");
  if (!vocab_field) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, "/meta.json has no \"vocab_size\" (or \"V\") given as an unsigned integer"));
  }
  std::optional<uint64_t> dim_field = JsonUintField(meta, "dim");
  if (!dim_field) dim_field = JsonUintField(meta, "d");
  if (!dim_field) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, "/meta.json has no \"dim\" (or \"d\") given as an unsigned integer"));
  }
  const uint64_t vocab = *vocab_field, dim = *dim_field;
  if (vocab == 0 || vocab > kMaxVocab || dim == 0 || dim > kMaxDim) {
    return absl::InvalidArgumentError(absl::StrCat(name, "/meta.json: vocab_size ", vocab,
                                                   " and dim ", dim,
                                                   " are out of range (1..2^26, 1..65536)"));
  }
  // Every file is opened and its size checked before anything is allocated.
  // W.f32, else W.f16; one that is there but refused (a link leading out
  // of the models directory: PermissionDenied; a FIFO) says why, it is not
  // "missing".
  bool f32 = true;
  absl::StatusOr<ConfinedFile> w_opened = root.OpenFile(prefix + "W.f32");
  if (absl::IsNotFound(w_opened.status())) {
    f32 = false;
    w_opened = root.OpenFile(prefix + "W.f16");
    if (absl::IsNotFound(w_opened.status())) {
      return absl::NotFoundError(
          absl::StrCat("model directory '", name, "' has neither W.f32 nor W.f16"));
    }
  }
  ZOOM_ASSIGN_OR_RETURN(ConfinedFile w_file, std::move(w_opened));
  ZOOM_RETURN_IF_ERROR(CheckSize(w_file, vocab * dim * (f32 ? 4 : 2),
                                 f32 ? "V × d float32" : "V × d float16"));
  ZOOM_ASSIGN_OR_RETURN(ConfinedFile b_file, root.OpenFile(prefix + "b.f32"));
  ZOOM_RETURN_IF_ERROR(CheckSize(b_file, vocab * 4, "V float32"));
  ZOOM_ASSIGN_OR_RETURN(ConfinedFile vocab_file, root.OpenFile(prefix + "vocab.txt"));
  if (vocab_file.size() > vocab * 1024) {
    return absl::InvalidArgumentError(absl::StrCat(name, "/vocab.txt has ", vocab_file.size(),
                                                   " bytes: more than 1 KiB per word"));
  }
  if (admit) {
    ZOOM_RETURN_IF_ERROR(admit(EstimateModelBytes(vocab, dim, vocab_file.size(), 16)));
  }
  ZOOM_RETURN_IF_ERROR(CheckCancel(cancel));

  SoftmaxModel m;
  m.vocab = static_cast<uint32_t>(vocab);
  m.dim = static_cast<uint32_t>(dim);
  m.W.resize(vocab * dim);
  if (f32) {
    ZOOM_RETURN_IF_ERROR(w_file.ReadAll(m.W.data(), vocab * dim * 4));
  } else {
    std::vector<uint16_t> half(vocab * dim);
    ZOOM_RETURN_IF_ERROR(w_file.ReadAll(half.data(), vocab * dim * 2));
    for (size_t i = 0; i < m.W.size(); ++i) m.W[i] = HalfToFloat(half[i]);
  }
  ZOOM_RETURN_IF_ERROR(CheckCancel(cancel));
  m.b.resize(vocab);
  ZOOM_RETURN_IF_ERROR(b_file.ReadAll(m.b.data(), vocab * 4));
  for (size_t i = 0; i < m.W.size(); ++i) {
    if (!std::isfinite(m.W[i])) {
      return absl::InvalidArgumentError(absl::StrCat("W row ", i / dim, " column ", i % dim,
                                                     " is not finite"));
    }
  }
  // Rows within the magnitude rule (common/vector_limits.h), as contexts
  // are: the transformed rows' norms and every logit stay finite.
  for (size_t i = 0; i < vocab; ++i) {
    if (!std::isfinite(m.b[i]) || std::fabs(m.b[i]) > kMaxVectorNorm) {
      return absl::InvalidArgumentError(
          absl::StrCat("b[", i, "] is ", m.b[i], "; biases must be finite and at most 1e18"));
    }
    if (absl::Status st = CheckVectorMagnitude(Metric::kL2, m.W.data() + i * dim, dim);
        !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("W row ", i, ": ", st.message()));
    }
  }
  ZOOM_ASSIGN_OR_RETURN(std::string text, vocab_file.ReadToString(vocab * 1024));
  m.words = absl::StrSplit(text, '\n');
  if (!m.words.empty() && m.words.back().empty()) m.words.pop_back();  // the final newline
  if (m.words.size() != vocab) {
    return absl::InvalidArgumentError(absl::StrCat(name, "/vocab.txt has ", m.words.size(),
                                                   " lines; meta.json says vocab_size ", vocab));
  }
  return m;
}

absl::StatusOr<SoftmaxModel> ReadModelDirAt(const std::string& path) {
  const fs::path p = fs::path(path).lexically_normal();
  const fs::path dir = p.has_filename() ? p : p.parent_path();
  const std::string parent = dir.has_parent_path() ? dir.parent_path().string() : ".";
  ZOOM_ASSIGN_OR_RETURN(ConfinedDir root, ConfinedDir::Open(parent.empty() ? "." : parent));
  return ReadModelDir(root, dir.filename().string());
}

DecoderEngine::DecoderEngine(const DecoderOptions& options) : options_(options) {
  if (!options_.models_dir.empty()) {
    auto root = ConfinedDir::Open(options_.models_dir);
    if (root.ok()) {
      root_ = std::make_unique<ConfinedDir>(std::move(*root));
    } else {
      root_error_ = std::string(root.status().message());
      ZOOM_LOG(WARNING, "models directory ", options_.models_dir, ": ", root_error_,
               "; LoadModel is off");
    }
  }
  for (int i = 0; i < std::max(1, options_.loader_threads); ++i) {
    loaders_.emplace_back([this] { LoaderMain(); });
  }
}

DecoderEngine::~DecoderEngine() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (auto& [name, m] : models_) m->cancel = true;
    for (auto& m : queue_) m->cancel = true;
  }
  for (auto& t : loaders_) t.join();
}

absl::Status ValidateLoadRequest(const std::string& name, const std::string& dir,
                                 const index::FgdOptions& options, uint32_t default_ef,
                                 const DecodeLimits& limits) {
  ZOOM_RETURN_IF_ERROR(ValidateModelName(name));
  ZOOM_RETURN_IF_ERROR(options.hnsw.Validate());
  if (default_ef > limits.max_ef) {
    return absl::InvalidArgumentError(absl::StrCat(
        "default_ef ", default_ef, " is above this server's max ef of ", limits.max_ef));
  }
  if (dir.empty()) return absl::InvalidArgumentError("the model directory is required");
  return ConfinedDir::ValidateName(dir, "model directory");
}

absl::StatusOr<std::shared_ptr<LoadedModel>> DecoderEngine::Load(
    const std::string& name, const std::string& dir, const index::FgdOptions& options,
    uint32_t default_ef) {
  ZOOM_RETURN_IF_ERROR(ValidateLoadRequest(name, dir, options, default_ef, options_.limits));
  if (root_ == nullptr) {
    return absl::FailedPreconditionError(
        options_.models_dir.empty()
            ? "this zoomd has no models directory: start it with --models_dir DIR and name a "
              "model directory under it"
            : "the server's models directory cannot be opened (see the server log)");
  }
  auto model = std::make_shared<LoadedModel>();
  model->name = name;
  model->dir = dir;
  model->options = options;
  model->options.build_threads = options_.build_threads;
  if (default_ef != 0) {
    model->default_ef = default_ef;
    model->default_ef_source = LoadedModel::EfSource::kRequest;
  }
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::UnavailableError("the server is shutting down");
  uint32_t active = 0;
  for (const auto& [n, m] : models_) active += m->state.load() != ModelState::kFailed;
  auto it = models_.find(name);
  if (it != models_.end() && it->second->state.load() != ModelState::kFailed) {
    return absl::AlreadyExistsError(
        absl::StrCat("model '", name, "' is already loaded; unload it first"));
  }
  if (active >= options_.max_models) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "this server holds its maximum of ", options_.max_models,
        " models (--max_models); unload one first"));
  }
  // Failed entries stay listed (with their error) but are bounded: the
  // oldest names go first once there are many.
  uint32_t failed = static_cast<uint32_t>(models_.size()) - active;
  for (auto f = models_.begin(); failed >= kMaxFailedEntries && f != models_.end();) {
    if (f->second->state.load() == ModelState::kFailed && f->first != name) {
      f = models_.erase(f);
      --failed;
    } else {
      ++f;
    }
  }
  models_[name] = model;  // replaces a failed one
  queue_.push_back(model);
  return model;
}

void DecoderEngine::LoaderMain() {
  for (;;) {
    std::shared_ptr<LoadedModel> model;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](DecoderEngine* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(e->mu_) {
            return e->stopping_ || !e->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping
      model = std::move(queue_.front());
      queue_.pop_front();
    }
    absl::Status st;
    try {
      LoadMain(model);
    } catch (const std::bad_alloc&) {
      st = absl::ResourceExhaustedError("out of memory while loading the model");
    } catch (const std::exception& e) {
      st = absl::InternalError(absl::StrCat("loading the model failed: ", e.what()));
    }
    if (!st.ok()) Finish(model, st);
  }
}

void DecoderEngine::LoadMain(const std::shared_ptr<LoadedModel>& model) {
  Stopwatch sw;
  if (absl::Status st = CheckCancel(&model->cancel); !st.ok()) return Finish(model, st);
  const auto admit = [&](uint64_t bytes) {
    absl::MutexLock lock(&mu_);
    if (reserved_bytes_ + bytes > options_.max_model_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "model '", model->name, "' needs about ", bytes >> 20, " MiB; the models loaded take ",
          reserved_bytes_ >> 20, " of the server's ", options_.max_model_bytes >> 20,
          " MiB budget (--max_model_bytes); unload one first"));
    }
    reserved_bytes_ += bytes;
    model->reserved_bytes = bytes;
    return absl::OkStatus();
  };
  auto m = ReadModelDir(*root_, model->dir, admit, &model->cancel);
  if (!m.ok()) return Finish(model, m.status());
  model->vocab = m->vocab;
  model->dim = m->dim;
  model->words = std::move(m->words);
  model->progress = 0.2;
  std::string cache;
  if (!options_.cache_dir.empty()) {
    std::error_code ec;
    fs::create_directories(options_.cache_dir, ec);
    cache = (fs::path(options_.cache_dir) /
             absl::StrCat(model->name, "-", Fingerprint(*root_, model->dir, model->options),
                          ".zfgd"))
                .string();
    if (fs::exists(cache, ec)) {
      auto idx = index::FgdIndex::Load(cache);
      if (idx.ok() && (*idx)->vocab_size() == m->vocab && (*idx)->dim() == m->dim) {
        model->index = std::move(*idx);
        model->graph_from_cache = true;
      } else {
        ZOOM_LOG(WARNING, "model ", model->name, ": cached graph ", cache,
                 " unusable; rebuilding");
      }
    }
  }
  if (model->index == nullptr) {
    index::FgdOptions build = model->options;
    build.cancel = &model->cancel;
    std::atomic<double> graph_progress{0};
    build.progress = &graph_progress;
    auto idx = index::FgdIndex::Build(m->W.data(), m->b.data(), m->vocab, m->dim, build);
    if (!idx.ok()) return Finish(model, idx.status());
    model->index = std::move(*idx);
    if (!cache.empty()) {
      absl::Status st = model->index->Save(cache);
      if (!st.ok()) ZOOM_LOG(WARNING, "model ", model->name, ": graph cache not written: ", st.message());
    }
  }
  model->progress = 0.95;
  if (model->default_ef_source != LoadedModel::EfSource::kRequest) CalibrateModel(model.get());
  if (absl::Status st = CheckCancel(&model->cancel); !st.ok()) return Finish(model, st);
  model->progress = 1.0;
  ZOOM_LOG(INFO, "model ", model->name, ": V ", model->vocab, ", d ", model->dim, ", graph ",
           model->graph_from_cache ? "loaded from cache" : "built", ", default ef ",
           model->default_ef == 0 ? std::string("built-in") : absl::StrCat(model->default_ef),
           ", in ", static_cast<int64_t>(sw.ElapsedMicros() / 1000), " ms");
  Finish(model, absl::OkStatus());
}

void DecoderEngine::CalibrateModel(LoadedModel* model) const {
  const std::string file = model->dir + "/H.f32";
  auto fail = [&](std::string why) {
    model->default_ef = 0;
    model->default_ef_source = LoadedModel::EfSource::kBuiltin;
    model->calibration_error = std::move(why);
  };
  auto f = root_->OpenFile(file);
  if (!f.ok()) {
    if (absl::IsNotFound(f.status())) {
      return fail(absl::StrCat("no ", file, " (contexts to calibrate the default ef on)"));
    }
    ZOOM_LOG(WARNING, "model ", model->name, ": ", f.status().message());
    return fail(std::string(f.status().message()));
  }
  const uint64_t row = uint64_t{model->dim} * 4;
  if (f->size() == 0 || f->size() % row != 0) {
    std::string why = absl::StrCat(file, " has ", f->size(), " bytes, not a positive multiple of ",
                                   row, " (d = ", model->dim, " float32 per context)");
    ZOOM_LOG(WARNING, "model ", model->name, ": ", why);
    return fail(std::move(why));
  }
  const uint64_t rows = std::min(f->size(), kMaxCalibrationBytes / row * row) / row;
  if (rows == 0) {
    return fail(absl::StrCat("one context of d = ", model->dim, " is above the ",
                             kMaxCalibrationBytes >> 20, " MiB read for calibration"));
  }
  std::vector<float> h(rows * model->dim);
  if (absl::Status st = f->ReadAll(h.data(), rows * row); !st.ok()) {
    ZOOM_LOG(WARNING, "model ", model->name, ": ", st.message());
    return fail(std::string(st.message()));
  }
  Stopwatch sw;
  auto cal = CalibrateDefaultEf(*model->index, h.data(), rows, &model->cancel);
  if (!cal.ok()) {
    if (absl::IsCancelled(cal.status())) return;
    std::string why = absl::StrCat(file, ": ", cal.status().message());
    ZOOM_LOG(WARNING, "model ", model->name, ": ", why);
    return fail(std::move(why));
  }
  model->calibration = *cal;
  if (cal->ef == 0) {
    std::string why = absl::StrCat("no ef up to ", std::end(kDefaultEfGrid)[-1],
                                   " reached P@1 ", kDefaultEfP1, " and P@5 ", kDefaultEfP5,
                                   " on ", cal->contexts, " contexts of ", file, " (at ",
                                   std::end(kDefaultEfGrid)[-1], ": ", cal->p1, ", ", cal->p5,
                                   "); set ef per request or default_ef at load");
    ZOOM_LOG(WARNING, "model ", model->name, ": ", why);
    return fail(std::move(why));
  }
  model->default_ef = cal->ef;
  model->default_ef_source = LoadedModel::EfSource::kCalibrated;
  ZOOM_LOG(INFO, "model ", model->name, ": default ef ", cal->ef, " (P@1 ", cal->p1, ", P@5 ",
           cal->p5, " on ", cal->contexts, " contexts of ", file, ", ",
           static_cast<int64_t>(sw.ElapsedMicros() / 1000), " ms)");
}

void DecoderEngine::Finish(const std::shared_ptr<LoadedModel>& model, const absl::Status& st) {
  std::vector<std::function<void(absl::Status)>> done;
  {
    absl::MutexLock lock(&mu_);
    if (st.ok() && !model->cancel.load()) {
      model->state = ModelState::kServing;
    } else {
      const absl::Status why = st.ok() ? CheckCancel(&model->cancel) : st;
      model->error = std::string(why.message());
      model->error_code = why.code();
      model->index.reset();
      model->words.clear();
      reserved_bytes_ -= std::min(reserved_bytes_, model->reserved_bytes);
      model->reserved_bytes = 0;
      model->state = ModelState::kFailed;
      ZOOM_LOG(WARNING, "model ", model->name, " from ", model->dir, ": ", why.ToString());
    }
    auto range = waiters_.equal_range(model.get());
    for (auto it = range.first; it != range.second; ++it) done.push_back(std::move(it->second));
    waiters_.erase(range.first, range.second);
  }
  if (model->state.load() == ModelState::kFailed) ReleaseFreedMemory();
  const absl::Status result = StatusOf(*model);
  for (auto& fn : done) fn(result);
}

absl::Status DecoderEngine::StatusOf(const LoadedModel& model) {
  if (model.state.load() != ModelState::kFailed) return absl::OkStatus();
  return absl::Status(model.error_code == absl::StatusCode::kOk ? absl::StatusCode::kInternal
                                                                : model.error_code,
                      absl::StrCat("model '", model.name, "' cannot be loaded: ", model.error));
}

absl::Status DecoderEngine::Wait(const std::shared_ptr<LoadedModel>& model) const {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](LoadedModel* m) { return m->state.load() != ModelState::kLoading; }, model.get()));
  return StatusOf(*model);
}

void DecoderEngine::WhenLoaded(const std::shared_ptr<LoadedModel>& model,
                               std::function<void(absl::Status)> done) const {
  {
    absl::MutexLock lock(&mu_);
    if (model->state.load() == ModelState::kLoading) {
      waiters_.emplace(model.get(), std::move(done));
      return;
    }
  }
  done(StatusOf(*model));
}

absl::Status DecoderEngine::Unload(const std::string& name, const LoadedModel* only) {
  std::shared_ptr<LoadedModel> gone;
  {
    absl::MutexLock lock(&mu_);
    auto it = models_.find(name);
    if (it == models_.end() || (only != nullptr && it->second.get() != only)) {
      return absl::NotFoundError(
          absl::StrCat("model '", EchoForMessage(name), "' is not loaded"));
    }
    gone = std::move(it->second);
    models_.erase(it);
    gone->cancel = true;  // a load in progress stops at its next check
    if (gone->state.load() == ModelState::kServing) {
      reserved_bytes_ -= std::min(reserved_bytes_, gone->reserved_bytes);
      gone->reserved_bytes = 0;
    }
  }
  const bool last = gone.use_count() == 1;
  gone.reset();
  if (last) ReleaseFreedMemory();  // give the freed rows and graph back to the OS
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<LoadedModel>> DecoderEngine::GetServing(
    const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = models_.find(name);
  if (it == models_.end()) {
    return absl::NotFoundError(absl::StrCat("model '", EchoForMessage(name),
                                            "' is not loaded (LoadModel it)"));
  }
  const ModelState st = it->second->state.load();
  if (st == ModelState::kLoading) {
    return absl::UnavailableError(absl::StrCat("model '", name, "' is still loading"));
  }
  if (st == ModelState::kFailed) {
    return absl::FailedPreconditionError(
        absl::StrCat("model '", name, "' failed to load: ", it->second->error));
  }
  return it->second;
}

std::vector<std::shared_ptr<LoadedModel>> DecoderEngine::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<LoadedModel>> out;
  for (const auto& [name, m] : models_) out.push_back(m);
  return out;
}

// ---- TopK --------------------------------------------------------------------

absl::Status DecoderEngine::TopK(const TopKRequest& req, const CallContext& call,
                                 std::vector<TopKAnswer>* answers, TopKStats* stats) const {
  Stopwatch sw;
  answers->clear();
  const DecodeLimits& limits = options_.limits;
  if (req.contexts.empty()) return absl::InvalidArgumentError("no contexts to decode");
  if (req.contexts.size() > limits.max_contexts) {
    return absl::InvalidArgumentError(absl::StrCat("the request has ", req.contexts.size(),
                                                   " contexts; the limit is ",
                                                   limits.max_contexts, " (split it)"));
  }
  if (req.k == 0) return absl::InvalidArgumentError("k must be at least 1");
  if (req.k > limits.max_k) {
    return absl::InvalidArgumentError(
        absl::StrCat("k ", req.k, " is above this server's limit of ", limits.max_k));
  }
  if (req.ef > limits.max_ef) {
    return absl::InvalidArgumentError(
        absl::StrCat("ef ", req.ef, " is above this server's limit of ", limits.max_ef));
  }
  ZOOM_ASSIGN_OR_RETURN(auto model, GetServing(req.model));
  const uint32_t d = model->dim;
  if (req.k > model->vocab) {
    return absl::InvalidArgumentError(
        absl::StrCat("k ", req.k, " is above the model's |V| ", model->vocab));
  }
  const size_t n = req.contexts.size();
  std::vector<float> h(n * d);
  for (size_t i = 0; i < n; ++i) {
    const absl::Span<const float> c = req.contexts[i];
    if (c.size() != d) {
      return absl::InvalidArgumentError(absl::StrCat("context #", i, " has ", c.size(),
                                                     " floats; model '", req.model,
                                                     "' has d = ", d));
    }
    // The magnitude rule of vectors (common/vector_limits.h): with rows of
    // W within it too (checked at load), every logit, distance and
    // probability stays finite.
    if (absl::Status st = CheckVectorMagnitude(Metric::kL2, c.data(), d); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("context #", i, ": ", st.message()));
    }
    std::copy(c.begin(), c.end(), h.begin() + i * d);
  }
  index::FgdSearchParams p;
  p.k = req.k;
  p.ef = req.ef != 0 ? req.ef
                     : std::min(std::max(limits.max_ef, req.k),
                                DefaultEfFor(model->default_ef, req.k));
  p.exact = req.exact;
  p.tail_samples = req.tail_samples == 0 ? 256 : req.tail_samples;
  switch (req.tail) {
    case TopKRequest::Tail::kDefault:
      p.tail = req.tail_samples > 0 ? index::FgdTail::kSample : index::FgdTail::kClusters;
      break;
    case TopKRequest::Tail::kClusters:
      p.tail = index::FgdTail::kClusters;
      break;
    case TopKRequest::Tail::kSample:
      p.tail = index::FgdTail::kSample;
      break;
    case TopKRequest::Tail::kNone:
      p.tail = index::FgdTail::kNone;
      break;
  }
  // In chunks (the exact mode's GEMM keeps a chunk's batching), with the
  // deadline and the cancellation checked before each.
  constexpr size_t kChunk = 64;
  std::vector<index::FgdResult> results;
  std::vector<index::FgdResult> part;
  results.reserve(n);
  for (size_t first = 0; first < n; first += kChunk) {
    if (call.cancelled != nullptr && call.cancelled->load()) {
      return absl::CancelledError(absl::StrCat("cancelled after ", first, " of ", n, " contexts"));
    }
    if (absl::Now() >= call.deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("the deadline passed after ", first, " of ", n, " contexts"));
    }
    const size_t m = std::min(kChunk, n - first);
    ZOOM_RETURN_IF_ERROR(model->index->Search(h.data() + first * d, m, p, &part));
    for (auto& r : part) results.push_back(std::move(r));
  }
  const double us = sw.ElapsedMicros();
  answers->resize(n);
  uint64_t evals = 0;
  for (size_t i = 0; i < n; ++i) {
    index::FgdResult& r = results[i];
    TopKAnswer& a = (*answers)[i];
    a.ids = std::move(r.ids);
    a.logits = std::move(r.logits);
    if (req.with_probs) a.probs = std::move(r.probs);
    if (req.with_words) {
      a.words.reserve(a.ids.size());
      for (uint32_t id : a.ids) a.words.push_back(model->words[id]);
    }
    a.tail_mass = r.tail_mass;
    a.micros = static_cast<uint64_t>(us / static_cast<double>(n));
    a.distance_evals = r.distance_evals;
    a.ef = p.exact ? 0 : std::max(p.ef, req.k);
    evals += r.distance_evals;
  }
  if (stats != nullptr) {
    stats->contexts = n;
    stats->distance_evals = evals;
    stats->exact = p.exact;
    stats->seconds = us * 1e-6;
  }
  return absl::OkStatus();
}

}  // namespace zoom::server
