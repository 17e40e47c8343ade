#include "server/engine/decoder_engine.h"

#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/binary_io.h"
#include "common/json.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/timer.h"
#include "common/vector_limits.h"
#include "server/engine/collection.h"  // ValidateCollectionName

namespace zoom::server {
namespace {

namespace fs = std::filesystem;

absl::Status CheckSize(const std::string& path, uint64_t expected, const char* what) {
  std::error_code ec;
  const uint64_t have = fs::file_size(path, ec);
  if (ec) return absl::NotFoundError(absl::StrCat("model file ", path, " is missing"));
  if (have != expected) {
    return absl::InvalidArgumentError(absl::StrCat("model file ", path, " has ", have,
                                                   " bytes; ", what, " needs ", expected));
  }
  return absl::OkStatus();
}

std::string Fingerprint(const std::string& dir, const index::FgdOptions& o) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t v) {
    h ^= v;
    h *= 1099511628211ull;
  };
  for (const char* f : {"W.f32", "W.f16", "b.f32", "meta.json"}) {
    struct stat st;
    if (stat((fs::path(dir) / f).c_str(), &st) == 0) {
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

}  // namespace

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

absl::StatusOr<SoftmaxModel> ReadModelDir(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat("model directory ", dir, " does not exist"));
  }
  ZOOM_ASSIGN_OR_RETURN(std::string meta, ReadFileToString((fs::path(dir) / "meta.json").string()));
  std::optional<uint64_t> vocab_field = JsonUintField(meta, "vocab_size");
  if (!vocab_field) vocab_field = JsonUintField(meta, "V");
  if (!vocab_field) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, "/meta.json has no \"vocab_size\" (or \"V\") number"));
  }
  std::optional<uint64_t> dim_field = JsonUintField(meta, "dim");
  if (!dim_field) dim_field = JsonUintField(meta, "d");
  if (!dim_field) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, "/meta.json has no \"dim\" (or \"d\") number"));
  }
  const uint64_t vocab = *vocab_field, dim = *dim_field;
  if (vocab == 0 || vocab > (1u << 26) || dim == 0 || dim > 65536) {
    return absl::InvalidArgumentError(absl::StrCat(dir, "/meta.json: vocab_size ", vocab,
                                                   " and dim ", dim, " are out of range"));
  }
  SoftmaxModel m;
  m.vocab = static_cast<uint32_t>(vocab);
  m.dim = static_cast<uint32_t>(dim);
  const std::string w32 = (fs::path(dir) / "W.f32").string();
  const std::string w16 = (fs::path(dir) / "W.f16").string();
  const std::string bpath = (fs::path(dir) / "b.f32").string();
  m.W.resize(vocab * dim);
  if (fs::exists(w32, ec)) {
    ZOOM_RETURN_IF_ERROR(CheckSize(w32, vocab * dim * 4, "V × d float32"));
    ZOOM_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(w32));
    std::memcpy(m.W.data(), bytes.data(), bytes.size());
  } else if (fs::exists(w16, ec)) {
    ZOOM_RETURN_IF_ERROR(CheckSize(w16, vocab * dim * 2, "V × d float16"));
    ZOOM_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(w16));
    for (size_t i = 0; i < m.W.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      m.W[i] = HalfToFloat(h);
    }
  } else {
    return absl::NotFoundError(absl::StrCat("model directory ", dir, " has neither W.f32 nor W.f16"));
  }
  ZOOM_RETURN_IF_ERROR(CheckSize(bpath, vocab * 4, "V float32"));
  ZOOM_ASSIGN_OR_RETURN(std::string bbytes, ReadFileToString(bpath));
  m.b.resize(vocab);
  std::memcpy(m.b.data(), bbytes.data(), bbytes.size());
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
  std::ifstream vocab_in(fs::path(dir) / "vocab.txt");
  if (!vocab_in) return absl::NotFoundError(absl::StrCat(dir, "/vocab.txt is missing"));
  std::string line;
  while (std::getline(vocab_in, line)) m.words.push_back(line);
  if (m.words.size() != vocab) {
    return absl::InvalidArgumentError(absl::StrCat(dir, "/vocab.txt has ", m.words.size(),
                                                   " lines; meta.json says vocab_size ", vocab));
  }
  return m;
}

DecoderEngine::DecoderEngine(const DecoderOptions& options) : options_(options) {}

DecoderEngine::~DecoderEngine() {
  std::vector<std::thread> loaders;
  {
    absl::MutexLock lock(&mu_);
    loaders.swap(loaders_);
  }
  for (auto& t : loaders) t.join();
}

absl::StatusOr<std::shared_ptr<LoadedModel>> DecoderEngine::Load(
    const std::string& name, const std::string& dir, const index::FgdOptions& options) {
  absl::Status name_ok = ValidateCollectionName(name);
  if (!name_ok.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model name must be 1..64 characters of [A-Za-z0-9_-], got '", name, "'"));
  }
  ZOOM_RETURN_IF_ERROR(options.hnsw.Validate());
  if (dir.empty()) return absl::InvalidArgumentError("the model directory is required");
  auto model = std::make_shared<LoadedModel>();
  model->name = name;
  model->dir = dir;
  model->options = options;
  model->options.build_threads = options_.build_threads;
  absl::MutexLock lock(&mu_);
  if (models_.contains(name)) {
    return absl::AlreadyExistsError(
        absl::StrCat("model '", name, "' is already loaded; unload it first"));
  }
  models_[name] = model;
  loaders_.emplace_back([this, model] { LoadMain(model); });
  return model;
}

void DecoderEngine::LoadMain(std::shared_ptr<LoadedModel> model) {
  Stopwatch sw;
  auto fail = [&](const absl::Status& st) {
    model->error = std::string(st.message());
    model->state = ModelState::kFailed;
    ZOOM_LOG(WARNING, "model ", model->name, " from ", model->dir, ": ", st.ToString());
  };
  auto m = ReadModelDir(model->dir);
  if (!m.ok()) return fail(m.status());
  model->vocab = m->vocab;
  model->dim = m->dim;
  model->words = std::move(m->words);
  model->progress = 0.2;
  std::string cache;
  if (!options_.cache_dir.empty()) {
    std::error_code ec;
    fs::create_directories(options_.cache_dir, ec);
    cache = (fs::path(options_.cache_dir) /
             absl::StrCat(model->name, "-", Fingerprint(model->dir, model->options), ".zfgd"))
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
    auto idx = index::FgdIndex::Build(m->W.data(), m->b.data(), m->vocab, m->dim, model->options);
    if (!idx.ok()) return fail(idx.status());
    model->index = std::move(*idx);
    if (!cache.empty()) {
      absl::Status st = model->index->Save(cache);
      if (!st.ok()) ZOOM_LOG(WARNING, "model ", model->name, ": graph cache not written: ", st.message());
    }
  }
  model->progress = 1.0;
  model->state = ModelState::kServing;
  ZOOM_LOG(INFO, "model ", model->name, ": V ", model->vocab, ", d ", model->dim, ", graph ",
           model->graph_from_cache ? "loaded from cache" : "built", " in ",
           static_cast<int64_t>(sw.ElapsedMicros() / 1000), " ms");
}

absl::Status DecoderEngine::Wait(const std::shared_ptr<LoadedModel>& model) const {
  while (model->state.load() == ModelState::kLoading) absl::SleepFor(absl::Milliseconds(10));
  if (model->state.load() == ModelState::kFailed) {
    return absl::FailedPreconditionError(
        absl::StrCat("model '", model->name, "' failed to load: ", model->error));
  }
  return absl::OkStatus();
}

absl::Status DecoderEngine::Unload(const std::string& name) {
  absl::MutexLock lock(&mu_);
  auto it = models_.find(name);
  if (it == models_.end()) {
    return absl::NotFoundError(absl::StrCat("model '", name, "' is not loaded"));
  }
  if (it->second->state.load() == ModelState::kLoading) {
    return absl::FailedPreconditionError(
        absl::StrCat("model '", name, "' is still loading; unload it after"));
  }
  models_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<LoadedModel>> DecoderEngine::GetServing(
    const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = models_.find(name);
  if (it == models_.end()) {
    return absl::NotFoundError(absl::StrCat("model '", name, "' is not loaded (LoadModel it)"));
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

}  // namespace zoom::server
