// File: client/zoomctl.cc
//
// zoomctl: the command-line client of zoomd.
//
//   zoomctl [--target HOST:PORT] COMMAND ARGS... [FLAGS...]
//
// Exit status: 0 on success; 1 when the server or the connection reports an
// error (printed as "error: CODE: message" on stderr), or when `health` is
// not SERVING; 2 on a usage error (unknown command or flag, missing or extra
// argument, bad number).
//
// Flags are checked before absl::ParseCommandLine runs (which would exit 1 on
// a bad flag) so that every usage error, flags included, exits 2.

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cli_flags.h"
#include "client/connection_flags.h"
#include "client/payload_json.h"
#include "client/progress_bar.h"
#include "client/zoom_client.h"
#include "client/zoomctl_output.h"
#include "common/json.h"
#include "common/texmex.h"
#include "google/protobuf/util/json_util.h"

// ---- Common flags -----------------------------------------------------------
ABSL_FLAG(std::string, target, "127.0.0.1:50051", "zoomd address, HOST:PORT");
ABSL_FLAG(double, timeout, 60,
          "Deadline of each RPC in seconds; 0 = none. import and build --wait "
          "have no deadline unless this flag is given");
ABSL_FLAG(bool, wait_for_ready, false,
          "Wait (up to the deadline) for the server to come up instead of "
          "failing fast with UNAVAILABLE");
ABSL_FLAG(bool, json, false, "Print machine-readable JSON on stdout");

// ---- create -----------------------------------------------------------------
ABSL_FLAG(uint32_t, dim, 0, "create: vector dimension");
ABSL_FLAG(std::string, metric, "", "create: l2, ip (inner product) or cosine");
ABSL_FLAG(std::string, dtype, "float32", "create: float32 or uint8");
ABSL_FLAG(
    std::string, index_kind, "",
    "create: hnsw_pq or ivf_hnsw_pq (default: the server's, ivf_hnsw_pq)");
ABSL_FLAG(uint32_t, shards, 0,
          "create, through a cluster's router: shards (fixed; 0: 1)");
ABSL_FLAG(uint32_t, replicas, 0,
          "create, through a cluster's router: replicas a shard (0: 2, or 1 on a one-node "
          "cluster)");
ABSL_FLAG(uint32_t, hnsw_m, 0, "create: HNSW links per node (0: default)");
ABSL_FLAG(uint32_t, ef_construction, 0, "create: HNSW ef_construction");
ABSL_FLAG(uint32_t, pq_m, 0, "create: PQ bytes per vector (0: about dim/2)");
ABSL_FLAG(uint32_t, pq_nbits, 0, "create: bits per PQ sub-code: 8, or 4 (ivf_hnsw_pq's fast scan)");
ABSL_FLAG(uint32_t, nlist, 0, "create: ivf_hnsw_pq clusters (0: ~4*sqrt(n))");
ABSL_FLAG(bool, opq, false, "create: learn an OPQ rotation before PQ");
ABSL_FLAG(std::string, quantizer, "",
          "create: pq (default) or rabitq (ivf_hnsw_pq, dim <= 1024: one 4-bit level a "
          "dimension with a scale per vector; a smaller error than PQ at the same bytes)");
ABSL_FLAG(bool, compact_links, false,
          "create: hnsw_pq only: keep the graph's level-0 links bit-packed "
          "(~1/3 the memory)");

// ---- import -----------------------------------------------------------------
ABSL_FLAG(uint64_t, id_offset, 0, "import: id of the file's first row");
ABSL_FLAG(uint64_t, limit, 0,
          "import: import at most this many rows (0: all); scroll: points per page (0: 100)");
ABSL_FLAG(uint64_t, offset, 0, "scroll: the first id of the page");
ABSL_FLAG(uint32_t, batch, 1000, "import: points per stream message");

// ---- build ------------------------------------------------------------------
ABSL_FLAG(bool, wait, false,
          "build, index-field: reply when the build has finished");
ABSL_FLAG(bool, all, false,
          "delete: allow a --filter that matches every point; alone, delete every point");
ABSL_FLAG(std::string, filter, "",
          "search, count: a filter in the JSON form of zoom.v1.Filter (Qdrant's shape), e.g. "
          "'{\"must\":[{\"key\":\"category\",\"match\":{\"value\":\"laptop\"}},"
          "{\"key\":\"price\",\"range\":{\"lte\":1000}}]}'");
ABSL_FLAG(std::string, type, "",
          "index-field: keyword, integer, float, bool or geo");

// ---- search / get / upsert --------------------------------------------------
ABSL_FLAG(std::string, query_file, "",
          "search: .fvecs/.bvecs file holding the query (see --row)");
ABSL_FLAG(uint64_t, row, 0, "search: row of --query_file to use");
ABSL_FLAG(std::string, vector, "",
          "search, upsert: the vector as comma-separated numbers");
ABSL_FLAG(uint32_t, k, 10, "search: number of neighbours");
ABSL_FLAG(uint32_t, ef, 0,
          "search: HNSW ef (0: the collection's default); create: default ef");
ABSL_FLAG(uint32_t, nprobe, 0,
          "search: IVF clusters probed; create: default nprobe");
ABSL_FLAG(uint32_t, rerank, 0,
          "search: candidates re-ranked from the SSD; create: default");
ABSL_FLAG(uint64_t, cache_bytes, 0,
          "create: the collection's DRAM cache of hot full vectors in bytes (0: the "
          "server's --cache_bytes)");
ABSL_FLAG(double, rerank_stop_sd, 0,
          "search: the re-rank that stops early (0: read all K'; 2 is a good start; "
          "docs/query-path.md)");
ABSL_FLAG(double, band_confidence, 0,
          "search: read only the candidates in doubt, each given an interval for its true "
          "distance at this many deviations of its code's error (0: off; 2 is a good start; "
          "ivf_hnsw_pq only; not with --rerank_stop_sd)");
ABSL_FLAG(bool, exact_scores, false,
          "search: with --band_confidence, read the certain-in candidates too so that every "
          "score is exact");
ABSL_FLAG(double, target_recall, 0,
          "search: the recall@10 to aim at (the knobs left 0 are the cheapest that reached it "
          "in the index's calibration: zoomctl info shows the curve); create: the collection's "
          "default target (0: the server's)");
ABSL_FLAG(bool, preview_only, false, "search: rank by PQ codes only");
ABSL_FLAG(bool, exact, false, "search: brute force over every stored vector");
ABSL_FLAG(bool, allow_partial, false,
          "search: answer with the preview ranking (flagged degraded) when the "
          "deadline leaves no time for the fullview");
ABSL_FLAG(bool, with_payload, false, "search, get: return payloads");
ABSL_FLAG(bool, with_vectors, false, "search, get: return vectors");
ABSL_FLAG(uint32_t, timeout_ms, 0,
          "search: deadline of the search in milliseconds (overrides "
          "--timeout; 0: use --timeout)");
ABSL_FLAG(std::string, payload, "", "upsert: the point's payload (bytes)");
ABSL_FLAG(bool, overwrite, false,
          "snapshot restore: replace the collection if it exists; set-payload: replace "
          "all of the points' fields");
ABSL_FLAG(std::string, fields, "",
          "upsert, set-payload: the typed payload as a JSON object, e.g. "
          "'{\"category\":\"laptop\",\"price\":999,\"tags\":[\"a\"],"
          "\"at\":{\"lat\":48.8,\"lon\":2.3}}'");
ABSL_FLAG(std::string, keys, "", "delete-payload: comma-separated field names (none: all)");
ABSL_FLAG(std::string, source, "",
          "snapshot restore: a snapshot kept on the server (COLLECTION/NAME.zsnap under its "
          "--snapshots_dir) instead of a local file");

namespace zoom::client {
namespace {

constexpr char kUsage[] =
    R"(usage: zoomctl [--target HOST:PORT] COMMAND ARGS... [FLAGS...]

Commands:
  create NAME --dim D --metric l2|ip|cosine [--dtype float32|uint8]
         [--index_kind hnsw_pq|ivf_hnsw_pq] [--hnsw_m M] [--ef_construction N]
         [--pq_m M] [--pq_nbits 8|4] [--quantizer pq|rabitq] [--nlist N] [--opq]
         [--compact_links] [--ef N] [--nprobe N] [--rerank N]   (the collection's search defaults)
         [--shards S] [--replicas R]   (a clustered collection, through a router)
  list
  info NAME
  drop NAME
  import NAME FILE.{fvecs,bvecs} [--id_offset N] [--limit N] [--batch N]
         ids are the row numbers plus --id_offset
  build NAME [--wait]
  search NAME (--query_file FILE.{fvecs,bvecs} [--row I] | --vector 'x,y,...')
         [--k K] [--ef N] [--nprobe N] [--rerank N] [--preview_only] [--exact]
         [--allow_partial] [--with_payload] [--with_vectors] [--timeout_ms N]
         [--filter JSON]   only points that pass it (see docs/filters.md)
  count NAME [--filter JSON]        live points (that pass the filter), exact
  index-field NAME FIELD --type keyword|integer|float|bool|geo [--wait]
         an in-RAM payload index (built in the background; --wait: until built)
  delete-index-field NAME FIELD
  get NAME ID... [--with_vectors] [--with_payload]
  delete NAME (ID... | --filter JSON)   the points, or every point passing the filter
  scroll NAME [--filter JSON] [--offset ID] [--limit N] [--with_payload] [--with_vectors]
         a page of points (passing the filter), ascending by id
  upsert NAME ID --vector 'x,y,...' [--payload STR] [--fields JSON]
  set-payload NAME ID... --fields JSON [--overwrite]   typed fields, vector untouched
  delete-payload NAME ID... [--keys a,b]               (no --keys: every field)
  compact NAME
  snapshot create NAME            a consistent snapshot while it takes writes
  snapshot list NAME
  snapshot download NAME SNAPSHOT FILE
  snapshot restore NAME FILE [--overwrite]      upload FILE into collection NAME
  snapshot restore NAME --source COLL/SNAP.zsnap [--overwrite]   (on the server)
  snapshot delete NAME SNAPSHOT
  health [SERVICE]

Flags for every command (they may come before or after the command):
  --target HOST:PORT  server address (default 127.0.0.1:50051)
  --timeout SECONDS   deadline of each RPC (default 60; 0 = none); import and
                      build --wait have no deadline unless --timeout is given
  --wait_for_ready    wait for the server to come up instead of failing fast
  --api_key_file FILE API key (the file's first line; or $ZOOM_API_KEY, or
                      --api_key KEY, which process lists show)
  --tls_ca FILE       TLS: CA certificates (PEM) the server's must chain to
  --tls_cert FILE     mTLS: this client's certificate (PEM), with --tls_key FILE
  --tls_server_name N the name to verify in the server's certificate
  --json              machine-readable JSON on stdout

Exit status: 0 success; 1 error from the server or the connection (printed as
"error: CODE: message" on stderr), or health other than SERVING; 2 usage error.
Run 'zoomctl --helpfull' for every flag.
)";

// ---- Input parsing ----------------------------------------------------------

std::optional<uint64_t> ParseId(absl::string_view text) {
  uint64_t value = 0;
  // SimpleAtoi accepts surrounding whitespace and a '+'; nothing else.
  if (!absl::SimpleAtoi(text, &value)) return std::nullopt;
  return value;
}

// "x,y,..." (optionally in brackets) -> floats; every component must be a
// finite number.
absl::StatusOr<std::vector<float>> ParseVector(absl::string_view text) {
  absl::string_view body = absl::StripAsciiWhitespace(text);
  if (absl::ConsumePrefix(&body, "[") && !absl::ConsumeSuffix(&body, "]")) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad --vector '", text, "': missing ']'"));
  }
  if (absl::StripAsciiWhitespace(body).empty()) {
    return absl::InvalidArgumentError("--vector is empty");
  }
  std::vector<float> values;
  for (absl::string_view part : absl::StrSplit(body, ',')) {
    part = absl::StripAsciiWhitespace(part);
    float value = 0;
    if (part.empty() || !absl::SimpleAtof(part, &value) ||
        !std::isfinite(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad --vector: component ", values.size(), " ('", part,
                       "') is not a finite number"));
    }
    values.push_back(value);
  }
  return values;
}

// ---- Commands ---------------------------------------------------------------

struct Invocation {
  std::vector<std::string> args;  // positional arguments after the command
  std::set<std::string> given;    // flags given on the command line
  bool json = false;
  ClientOptions options;
  std::string target;

  bool Given(const std::string& flag) const { return given.count(flag) > 0; }
  std::unique_ptr<ZoomClient> Connect() const {
    return ZoomClient::Connect(target, options);  // TLS files were checked by Main
  }
};

int RunCreate(Invocation& inv) {
  v1::CollectionSpec spec;
  spec.set_name(inv.args[0]);
  const uint32_t dim = absl::GetFlag(FLAGS_dim);
  if (dim == 0) return UsageError("create needs --dim D (D > 0)");
  spec.set_dim(dim);

  const std::string metric = absl::AsciiStrToLower(absl::GetFlag(FLAGS_metric));
  if (metric.empty()) return UsageError("create needs --metric l2|ip|cosine");
  if (metric == "l2") {
    spec.set_metric(v1::L2);
  } else if (metric == "ip" || metric == "inner_product") {
    spec.set_metric(v1::INNER_PRODUCT);
  } else if (metric == "cosine") {
    spec.set_metric(v1::COSINE);
  } else {
    return UsageError(
        absl::StrCat("bad --metric '", metric, "': expected l2, ip or cosine"));
  }

  const std::string dtype = absl::AsciiStrToLower(absl::GetFlag(FLAGS_dtype));
  if (dtype == "float32") {
    spec.set_dtype(v1::FLOAT32);
  } else if (dtype == "uint8") {
    spec.set_dtype(v1::UINT8);
  } else {
    return UsageError(
        absl::StrCat("bad --dtype '", dtype, "': expected float32 or uint8"));
  }

  v1::IndexSpec* index = spec.mutable_index();
  const std::string kind =
      absl::AsciiStrToLower(absl::GetFlag(FLAGS_index_kind));
  if (kind == "hnsw_pq") {
    index->set_kind(v1::HNSW_PQ);
  } else if (kind == "ivf_hnsw_pq") {
    index->set_kind(v1::IVF_HNSW_PQ);
  } else if (!kind.empty()) {
    return UsageError(absl::StrCat("bad --index_kind '", kind,
                                   "': expected hnsw_pq or ivf_hnsw_pq"));
  }
  index->set_m(absl::GetFlag(FLAGS_hnsw_m));
  index->set_ef_construction(absl::GetFlag(FLAGS_ef_construction));
  index->set_pq_m(absl::GetFlag(FLAGS_pq_m));
  index->set_pq_nbits(absl::GetFlag(FLAGS_pq_nbits));
  const std::string quantizer = absl::AsciiStrToLower(absl::GetFlag(FLAGS_quantizer));
  if (quantizer == "rabitq") {
    index->set_quantizer(v1::QUANTIZER_RABITQ);
  } else if (quantizer == "pq") {
    index->set_quantizer(v1::QUANTIZER_PQ);
  } else if (!quantizer.empty()) {
    return UsageError(
        absl::StrCat("bad --quantizer '", quantizer, "': expected pq or rabitq"));
  }
  index->set_nlist(absl::GetFlag(FLAGS_nlist));
  index->set_opq(absl::GetFlag(FLAGS_opq));
  index->set_compact_links(absl::GetFlag(FLAGS_compact_links));

  v1::SearchKnobs* knobs = spec.mutable_default_knobs();
  knobs->set_ef(absl::GetFlag(FLAGS_ef));
  knobs->set_nprobe(absl::GetFlag(FLAGS_nprobe));
  knobs->set_rerank_candidates(absl::GetFlag(FLAGS_rerank));
  knobs->set_target_recall(static_cast<float>(absl::GetFlag(FLAGS_target_recall)));
  spec.set_cache_bytes(absl::GetFlag(FLAGS_cache_bytes));
  spec.set_shards(absl::GetFlag(FLAGS_shards));
  spec.set_replicas(absl::GetFlag(FLAGS_replicas));

  return PrintInfoResult(inv.Connect()->CreateCollection(spec), inv.json);
}

int RunList(Invocation& inv) {
  absl::StatusOr<std::vector<v1::CollectionInfo>> list =
      inv.Connect()->ListCollections();
  if (!list.ok()) return Fail(list.status());
  if (inv.json) {
    v1::ListCollectionsResponse response;
    for (v1::CollectionInfo& info : *list) {
      *response.add_collections() = std::move(info);
    }
    return PrintJson(response);
  }
  if (list->empty()) {
    absl::PrintF("no collections\n");
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {
      {"NAME", "DIM", "METRIC", "DTYPE", "POINTS", "INDEX", "STATE", "DISK"}};
  for (const v1::CollectionInfo& info : *list) {
    const v1::CollectionSpec& spec = info.spec();
    rows.push_back(
        {spec.name(), absl::StrCat(spec.dim()),
         EnumName<v1::Metric>(spec.metric(), v1::Metric_Name),
         EnumName<v1::DType>(spec.dtype(), v1::DType_Name),
         absl::StrCat(info.points()),
         EnumName<v1::IndexKind>(spec.index().kind(), v1::IndexKind_Name),
         EnumName<v1::IndexState>(info.index_state(), v1::IndexState_Name),
         HumanBytes(info.disk_bytes())});
  }
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) {
      width[c] = std::max(width[c], row[c].size());
    }
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      if (c + 1 == row.size()) {
        absl::StrAppend(&line, row[c]);
      } else {
        absl::StrAppendFormat(&line, "%-*s  ", static_cast<int>(width[c]),
                              row[c]);
      }
    }
    absl::PrintF("%s\n", line);
  }
  return kExitOk;
}

int RunInfo(Invocation& inv) {
  return PrintInfoResult(inv.Connect()->GetCollection(inv.args[0]), inv.json);
}

int RunDrop(Invocation& inv) {
  absl::Status status = inv.Connect()->DropCollection(inv.args[0]);
  if (!status.ok()) return Fail(status);
  if (inv.json) {
    absl::PrintF("{\"dropped\":%s}\n", ::zoom::JsonQuote(inv.args[0]));
  } else {
    absl::PrintF("dropped collection '%s'\n", inv.args[0]);
  }
  return kExitOk;
}

// Feeds rows of a vecs file to ZoomClient::Import, reading a batch at a time.
class RowSource {
 public:
  RowSource(VecsReader* reader, uint64_t id_offset, uint64_t total,
            uint32_t chunk_rows)
      : reader_(reader),
        id_offset_(id_offset),
        total_(total),
        chunk_rows_(std::max<uint32_t>(chunk_rows, 1)),
        buffer_(static_cast<size_t>(chunk_rows_) * reader->dim()) {}

  // Fills point `i`. A read error is kept in status() and the point is left
  // without a vector (the server rejects it, ending the stream); the caller
  // reports status() in preference to the server's error.
  void Fill(uint64_t i, v1::Point* point) {
    point->set_id(id_offset_ + i);
    if (!status_.ok()) return;
    if (i < first_ || i >= first_ + rows_) {
      if (reader_->position() != i) {
        status_ = reader_->Seek(i);
        if (!status_.ok()) return;
      }
      const size_t want =
          static_cast<size_t>(std::min<uint64_t>(chunk_rows_, total_ - i));
      absl::StatusOr<size_t> got = reader_->ReadAsFloat(want, buffer_.data());
      if (!got.ok()) {
        status_ = got.status();
        return;
      }
      if (*got == 0) {
        status_ = absl::DataLossError(absl::StrCat(
            reader_->path(), ": unexpected end of file at row ", i));
        return;
      }
      first_ = i;
      rows_ = *got;
    }
    const size_t dim = reader_->dim();
    const float* row = buffer_.data() + (i - first_) * dim;
    // A .bvecs file's rows go as bytes (a quarter of the floats' size).
    client::SetVector(row, dim, reader_->type() == VecsType::kUint8, point);
  }

  const absl::Status& status() const { return status_; }

 private:
  VecsReader* reader_;
  const uint64_t id_offset_;
  const uint64_t total_;
  const uint32_t chunk_rows_;
  std::vector<float> buffer_;
  uint64_t first_ = 0;  // rows [first_, first_ + rows_) are in buffer_
  uint64_t rows_ = 0;
  absl::Status status_;
};

int RunImport(Invocation& inv) {
  const std::string& name = inv.args[0];
  const std::string& path = inv.args[1];
  absl::StatusOr<VecsType> type = VecsTypeFromPath(path);
  if (!type.ok() || *type == VecsType::kInt32) {
    return UsageError(
        absl::StrCat("import reads .fvecs or .bvecs files, not '", path, "'"));
  }
  const uint32_t batch = absl::GetFlag(FLAGS_batch);
  if (batch == 0) return UsageError("--batch must be positive");
  const uint64_t id_offset = absl::GetFlag(FLAGS_id_offset);
  const uint64_t limit = absl::GetFlag(FLAGS_limit);

  absl::StatusOr<VecsReader> reader = VecsReader::Open(path, *type);
  if (!reader.ok()) return Fail(reader.status());
  uint64_t total = reader->count();
  if (limit > 0) total = std::min(total, limit);
  if (total > 0 &&
      id_offset > std::numeric_limits<uint64_t>::max() - (total - 1)) {
    return UsageError(absl::StrCat("--id_offset ", id_offset, " plus ", total,
                                   " rows overflows a uint64 id"));
  }
  // Keep each stream message well under the client's message size limit.
  const uint64_t point_bytes = uint64_t{reader->dim()} * 4 + 32;
  const uint64_t max_batch = std::max<uint64_t>(
      1, static_cast<uint64_t>(inv.options.max_message_bytes) * 9 / 10 /
             point_bytes);
  if (batch > max_batch) {
    return UsageError(absl::StrCat(
        "--batch ", batch, " is too large for dimension ", reader->dim(),
        ": a message would exceed ", HumanBytes(inv.options.max_message_bytes),
        "; use at most ", max_batch));
  }

  std::unique_ptr<ZoomClient> client = inv.Connect();
  // Check the collection first: a clear error before any data is streamed.
  absl::StatusOr<v1::CollectionInfo> info = client->GetCollection(name);
  if (!info.ok()) return Fail(info.status());
  if (total > 0 && info->spec().dim() != reader->dim()) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        path, " holds vectors of dimension ", reader->dim(),
        " but collection '", name, "' has dimension ", info->spec().dim())));
  }

  RowSource source(&*reader, id_offset, total, batch);
  client::ProgressBar bar(total);
  absl::StatusOr<uint64_t> imported = client->Import(
      name, total,
      [&source](uint64_t i, v1::Point* point) { source.Fill(i, point); }, batch,
      [&bar](uint64_t done, uint64_t) { bar.Update(done); });
  bar.Finish();
  if (!source.status().ok()) return Fail(source.status());
  if (!imported.ok()) return Fail(imported.status());
  if (inv.json) {
    absl::PrintF(
        "{\"collection\":%s,\"imported\":%d,\"rows\":%d,\"seconds\":%.3f,"
        "\"points_per_second\":%.1f}\n",
        ::zoom::JsonQuote(name), *imported, total, bar.Seconds(), bar.Rate());
  } else {
    absl::PrintF("imported %d points into '%s' in %.1fs (%.0f points/s)\n",
                 *imported, name, bar.Seconds(), bar.Rate());
  }
  return kExitOk;
}

int RunBuild(Invocation& inv) {
  const bool wait = absl::GetFlag(FLAGS_wait);
  absl::StatusOr<v1::CollectionInfo> info =
      inv.Connect()->BuildIndex(inv.args[0], wait);
  if (info.ok() && !inv.json && !wait) {
    absl::PrintF("index build of '%s' started (see 'zoomctl info %s')\n",
                 inv.args[0], inv.args[0]);
  }
  return PrintInfoResult(info, inv.json);
}

// --filter (JSON) into *filter; an exit code for JSON that is not a Filter.
std::optional<int> ParseFilterFlag(v1::Filter* filter) {
  const std::string json = absl::GetFlag(FLAGS_filter);
  if (json.empty()) return std::nullopt;
  auto st = google::protobuf::util::JsonStringToMessage(json, filter);
  if (!st.ok()) {
    return UsageError(absl::StrCat("--filter is not a zoom.v1.Filter in JSON: ",
                                   st.message().as_string()));
  }
  return std::nullopt;
}

int RunSearch(Invocation& inv) {
  v1::SearchRequest request;
  request.set_collection(inv.args[0]);

  const std::string query_file = absl::GetFlag(FLAGS_query_file);
  const bool has_vector = inv.Given("vector");
  if (!query_file.empty() && has_vector) {
    return UsageError("search takes --query_file or --vector, not both");
  }
  if (query_file.empty() && !has_vector) {
    return UsageError(
        "search needs a query: --query_file FILE [--row I] or --vector "
        "'x,y,...'");
  }
  if (inv.Given("row") && query_file.empty()) {
    return UsageError("--row needs --query_file");
  }
  if (has_vector) {
    absl::StatusOr<std::vector<float>> vector =
        ParseVector(absl::GetFlag(FLAGS_vector));
    if (!vector.ok()) return UsageError(vector.status().message());
    request.mutable_vector()->Add(vector->begin(), vector->end());
  } else {
    absl::StatusOr<VecsType> type = VecsTypeFromPath(query_file);
    if (!type.ok() || *type == VecsType::kInt32) {
      return UsageError(
          absl::StrCat("--query_file must be an .fvecs or .bvecs file, not '",
                       query_file, "'"));
    }
    absl::StatusOr<VecsReader> reader = VecsReader::Open(query_file, *type);
    if (!reader.ok()) return Fail(reader.status());
    const uint64_t row = absl::GetFlag(FLAGS_row);
    if (row >= reader->count()) {
      return UsageError(absl::StrCat("--row ", row,
                                     " is out of range: ", query_file, " has ",
                                     reader->count(), " rows"));
    }
    std::vector<float> vector(reader->dim());
    absl::Status status = reader->Seek(row);
    if (!status.ok()) return Fail(status);
    absl::StatusOr<size_t> got = reader->ReadAsFloat(1, vector.data());
    if (!got.ok()) return Fail(got.status());
    if (*got != 1) {
      return Fail(absl::DataLossError(
          absl::StrCat(query_file, ": cannot read row ", row)));
    }
    client::SetVector(vector.data(), vector.size(), *type == VecsType::kUint8, &request);
  }

  const uint32_t k = absl::GetFlag(FLAGS_k);
  if (k == 0) return UsageError("--k must be positive");
  request.set_k(k);
  request.mutable_knobs()->set_ef(absl::GetFlag(FLAGS_ef));
  request.mutable_knobs()->set_nprobe(absl::GetFlag(FLAGS_nprobe));
  request.mutable_knobs()->set_rerank_candidates(absl::GetFlag(FLAGS_rerank));
  request.mutable_knobs()->set_rerank_stop_sd(
      static_cast<float>(absl::GetFlag(FLAGS_rerank_stop_sd)));
  request.mutable_knobs()->set_band_confidence(
      static_cast<float>(absl::GetFlag(FLAGS_band_confidence)));
  request.mutable_knobs()->set_target_recall(
      static_cast<float>(absl::GetFlag(FLAGS_target_recall)));
  request.set_preview_only(absl::GetFlag(FLAGS_preview_only));
  request.set_exact(absl::GetFlag(FLAGS_exact));
  request.set_allow_partial(absl::GetFlag(FLAGS_allow_partial));
  request.set_with_payload(absl::GetFlag(FLAGS_with_payload));
  request.set_with_vectors(absl::GetFlag(FLAGS_with_vectors));
  request.set_exact_scores(absl::GetFlag(FLAGS_exact_scores));
  if (std::optional<int> error = ParseFilterFlag(request.mutable_filter())) return *error;
  if (request.filter().ByteSizeLong() == 0) request.clear_filter();

  std::unique_ptr<ZoomClient> client = inv.Connect();
  const uint32_t timeout_ms = absl::GetFlag(FLAGS_timeout_ms);
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::SearchResponse> response =
      timeout_ms > 0 ? client->Search(request, absl::Milliseconds(timeout_ms))
                     : client->Search(request);
  const absl::Duration latency = absl::Now() - start;
  if (!response.ok()) return Fail(response.status());
  if (inv.json) return PrintJson(*response);

  const bool payloads = request.with_payload();
  size_t id_width = 2;
  for (const v1::Hit& hit : response->hits()) {
    id_width = std::max(id_width, absl::StrCat(hit.id()).size());
  }
  std::string header = absl::StrFormat(
      "%4s  %-*s  %12s", "rank", static_cast<int>(id_width), "id", "score");
  if (payloads) absl::StrAppend(&header, "  payload");
  absl::PrintF("%s\n", header);
  int rank = 0;
  for (const v1::Hit& hit : response->hits()) {
    std::string line =
        absl::StrFormat("%4d  %-*d  %12.6g", ++rank, static_cast<int>(id_width),
                        hit.id(), hit.score());
    if (payloads) {
      absl::StrAppend(&line, "  \"", absl::CHexEscape(hit.payload()), "\"");
      if (!hit.fields().empty()) absl::StrAppend(&line, "  ", client::FieldsToJson(hit.fields()));
    }
    if (hit.estimated()) absl::StrAppend(&line, " (estimated)");
    absl::PrintF("%s\n", line);
    if (request.with_vectors()) {
      absl::PrintF("      vector: %s\n", FormatVector(hit.vector()));
    }
  }
  if (response->hits().empty()) absl::PrintF("(no hits)\n");

  const v1::QueryStats& stats = response->stats();
  std::string line = absl::StrFormat(
      "stats: preview %dus, fullview %dus, rerank %dus, ssd_reads %d (%d rounds), "
      "bytes_read %d, candidates %d, distance_evals %d, cache_hits %d, "
      "round trip %.3fms",
      stats.preview_us(), stats.fullview_us(), stats.rerank_us(),
      stats.ssd_reads(), stats.fullview_rounds(), stats.bytes_read(), stats.candidates(),
      stats.distance_evals(), stats.cache_hits(),
      absl::ToDoubleMilliseconds(latency));
  if (stats.certain_in() > 0 || stats.certain_out() > 0) {
    absl::StrAppendFormat(&line, ", certain_in %d, certain_out %d", stats.certain_in(),
                          stats.certain_out());
  }
  if (stats.exact()) absl::StrAppend(&line, ", exact");
  if (stats.degraded()) absl::StrAppend(&line, ", DEGRADED (preview only)");
  if (response->degraded()) {
    absl::StrAppendFormat(&line, ", PARTIAL: coverage %.3g of the shards", response->coverage());
  }
  absl::PrintF("%s\n", line);
  if (stats.has_knobs()) {
    std::string knobs_line =
        absl::StrFormat("knobs: ef %d, nprobe %d, rerank_candidates %d", stats.knobs().ef(),
                        stats.knobs().nprobe(), stats.knobs().rerank_candidates());
    if (stats.knobs().band_confidence() > 0) {
      absl::StrAppendFormat(&knobs_line, ", band_confidence %g", stats.knobs().band_confidence());
    }
    if (stats.target_recall() > 0) {
      absl::StrAppendFormat(&knobs_line, " for target recall %.3g", stats.target_recall());
      if (stats.calibrated_recall() > 0) {
        absl::StrAppendFormat(&knobs_line, " (%.4f in calibration%s)", stats.calibrated_recall(),
                              stats.target_reached() ? "" : ": NOT reached");
      }
    }
    absl::PrintF("%s\n", knobs_line);
  }
  if (!stats.filter_strategy().empty()) {
    absl::PrintF("filter: %d matching points, strategy %s, %d expansions%s\n",
                 stats.filter_matches(), stats.filter_strategy(), stats.filter_expansions(),
                 stats.filter_scan() ? ", evaluated by a SCAN of the stored payloads" : "");
  }
  if (!stats.warning().empty()) absl::FPrintF(stderr, "warning: %s\n", stats.warning());
  return kExitOk;
}

int RunCount(Invocation& inv) {
  v1::CountRequest request;
  request.set_collection(inv.args[0]);
  if (std::optional<int> error = ParseFilterFlag(request.mutable_filter())) return *error;
  absl::StatusOr<v1::CountResponse> response = inv.Connect()->Count(request);
  if (!response.ok()) return Fail(response.status());
  if (inv.json) return PrintJson(*response);
  absl::PrintF("%d\n", response->count());
  if (!response->warning().empty()) absl::FPrintF(stderr, "warning: %s\n", response->warning());
  return kExitOk;
}

int RunIndexField(Invocation& inv) {
  v1::CreateFieldIndexRequest request;
  request.set_collection(inv.args[0]);
  request.set_field(inv.args[1]);
  const std::string type = absl::AsciiStrToUpper(absl::GetFlag(FLAGS_type));
  v1::FieldIndexType t;
  if (type.empty() || !v1::FieldIndexType_Parse(type, &t) || t == v1::FIELD_INDEX_TYPE_UNSPECIFIED) {
    return UsageError("index-field needs --type keyword, integer, float, bool or geo");
  }
  request.set_type(t);
  request.set_wait(absl::GetFlag(FLAGS_wait));
  return PrintInfoResult(inv.Connect()->CreateFieldIndex(request), inv.json);
}

int RunDeleteIndexField(Invocation& inv) {
  return PrintInfoResult(inv.Connect()->DeleteFieldIndex(inv.args[0], inv.args[1]), inv.json);
}

// Parses inv.args[from..] as ids into `ids`; returns an exit code on error.
std::optional<int> ParseIds(const Invocation& inv, size_t from,
                            std::vector<uint64_t>* ids) {
  for (size_t i = from; i < inv.args.size(); ++i) {
    std::optional<uint64_t> id = ParseId(inv.args[i]);
    if (!id.has_value()) {
      return UsageError(absl::StrCat("bad id '", inv.args[i],
                                     "': expected an integer 0..2^64-1"));
    }
    ids->push_back(*id);
  }
  return std::nullopt;
}

// The points of a Get or Scroll answer as text.
void PrintPoints(const google::protobuf::RepeatedPtrField<v1::Point>& points, bool payload,
                 bool vectors) {
  for (const v1::Point& point : points) {
    absl::PrintF("id %d\n", point.id());
    if (payload) {
      absl::PrintF("  payload: \"%s\"\n", absl::CHexEscape(point.payload()));
      absl::PrintF("  fields:  %s\n", client::FieldsToJson(point.fields()));
    }
    if (vectors) absl::PrintF("  vector:  %s\n", FormatVector(point.vector()));
  }
}

int RunScroll(Invocation& inv) {
  v1::ScrollRequest request;
  request.set_collection(inv.args[0]);
  if (std::optional<int> error = ParseFilterFlag(request.mutable_filter())) return *error;
  request.set_offset(absl::GetFlag(FLAGS_offset));
  const uint64_t limit = absl::GetFlag(FLAGS_limit);
  if (limit > 10000) return UsageError("--limit: at most 10000 points per page");
  request.set_limit(static_cast<uint32_t>(limit));
  request.set_with_vectors(absl::GetFlag(FLAGS_with_vectors));
  request.set_with_payload(absl::GetFlag(FLAGS_with_payload));
  absl::StatusOr<v1::ScrollResponse> response = inv.Connect()->Scroll(request);
  if (!response.ok()) return Fail(response.status());
  if (inv.json) return PrintJson(*response);
  PrintPoints(response->points(), request.with_payload(), request.with_vectors());
  if (response->has_next_offset()) {
    absl::PrintF("next page: --offset %d\n", response->next_offset());
  } else {
    absl::PrintF("(last page)\n");
  }
  return kExitOk;
}

int RunGet(Invocation& inv) {
  v1::GetRequest request;
  request.set_collection(inv.args[0]);
  std::vector<uint64_t> ids;
  if (std::optional<int> error = ParseIds(inv, 1, &ids)) return *error;
  request.mutable_ids()->Add(ids.begin(), ids.end());
  request.set_with_vectors(absl::GetFlag(FLAGS_with_vectors));
  request.set_with_payload(absl::GetFlag(FLAGS_with_payload));

  absl::StatusOr<v1::GetResponse> response = inv.Connect()->Get(request);
  if (!response.ok()) return Fail(response.status());
  if (inv.json) return PrintJson(*response);

  std::set<uint64_t> found;
  for (const v1::Point& point : response->points()) found.insert(point.id());
  PrintPoints(response->points(), request.with_payload(), request.with_vectors());
  std::vector<uint64_t> missing;
  for (uint64_t id : ids) {
    if (found.count(id) == 0) missing.push_back(id);
  }
  if (!missing.empty()) {
    absl::PrintF("not found: %s\n", absl::StrJoin(missing, " "));
  }
  return kExitOk;
}

int RunDelete(Invocation& inv) {
  std::vector<uint64_t> ids;
  if (std::optional<int> error = ParseIds(inv, 1, &ids)) return *error;
  const bool all = absl::GetFlag(FLAGS_all);
  if (inv.Given("filter") || (all && ids.empty())) {
    if (!ids.empty()) return UsageError("delete takes IDs or --filter, not both");
    v1::Filter filter;
    if (inv.Given("filter")) {
      if (std::optional<int> error = ParseFilterFlag(&filter)) return *error;
    }
    absl::StatusOr<uint64_t> deleted = inv.Connect()->DeleteByFilter(inv.args[0], filter, all);
    if (!deleted.ok()) return Fail(deleted.status());
    if (inv.json) {
      absl::PrintF("{\"deleted\":%d}\n", *deleted);
    } else {
      absl::PrintF("deleted %d points\n", *deleted);
    }
    return kExitOk;
  }
  if (ids.empty()) return UsageError("delete needs IDs or --filter JSON");
  absl::StatusOr<uint64_t> deleted = inv.Connect()->Delete(inv.args[0], ids);
  if (!deleted.ok()) return Fail(deleted.status());
  if (inv.json) {
    absl::PrintF("{\"deleted\":%d,\"requested\":%d}\n", *deleted, ids.size());
  } else {
    absl::PrintF("deleted %d of %d ids\n", *deleted, ids.size());
  }
  return kExitOk;
}

int RunUpsert(Invocation& inv) {
  std::vector<uint64_t> ids;
  if (std::optional<int> error = ParseIds(inv, 1, &ids)) return *error;
  if (!inv.Given("vector"))
    return UsageError("upsert needs --vector 'x,y,...'");
  absl::StatusOr<std::vector<float>> vector =
      ParseVector(absl::GetFlag(FLAGS_vector));
  if (!vector.ok()) return UsageError(vector.status().message());

  v1::UpsertRequest request;
  request.set_collection(inv.args[0]);
  v1::Point* point = request.add_points();
  point->set_id(ids[0]);
  point->mutable_vector()->Add(vector->begin(), vector->end());
  point->set_payload(absl::GetFlag(FLAGS_payload));
  if (inv.Given("fields")) {
    absl::Status st = client::FieldsFromJson(absl::GetFlag(FLAGS_fields), point->mutable_fields());
    if (!st.ok()) return UsageError(absl::StrCat("--fields: ", st.message()));
  }

  absl::StatusOr<uint64_t> upserted = inv.Connect()->Upsert(request);
  if (!upserted.ok()) return Fail(upserted.status());
  if (inv.json) {
    absl::PrintF("{\"upserted\":%d}\n", *upserted);
  } else {
    absl::PrintF("upserted %d point%s\n", *upserted, *upserted == 1 ? "" : "s");
  }
  return kExitOk;
}

// The answer of set-payload / delete-payload.
int PrintUpdated(const absl::StatusOr<uint64_t>& updated, size_t requested, bool json) {
  if (!updated.ok()) return Fail(updated.status());
  if (json) {
    absl::PrintF("{\"updated\":%d,\"requested\":%d}\n", *updated, requested);
  } else {
    absl::PrintF("updated %d of %d points\n", *updated, requested);
  }
  return kExitOk;
}

int RunSetPayload(Invocation& inv) {
  v1::SetPayloadRequest request;
  request.set_collection(inv.args[0]);
  std::vector<uint64_t> ids;
  if (std::optional<int> error = ParseIds(inv, 1, &ids)) return *error;
  request.mutable_ids()->Add(ids.begin(), ids.end());
  if (!inv.Given("fields")) return UsageError("set-payload needs --fields JSON");
  absl::Status st = client::FieldsFromJson(absl::GetFlag(FLAGS_fields), request.mutable_fields());
  if (!st.ok()) return UsageError(absl::StrCat("--fields: ", st.message()));
  request.set_overwrite(absl::GetFlag(FLAGS_overwrite));
  absl::StatusOr<uint64_t> updated = inv.Connect()->SetPayload(request);
  return PrintUpdated(updated, ids.size(), inv.json);
}

int RunDeletePayload(Invocation& inv) {
  v1::DeletePayloadRequest request;
  request.set_collection(inv.args[0]);
  std::vector<uint64_t> ids;
  if (std::optional<int> error = ParseIds(inv, 1, &ids)) return *error;
  request.mutable_ids()->Add(ids.begin(), ids.end());
  for (absl::string_view k : absl::StrSplit(absl::GetFlag(FLAGS_keys), ',', absl::SkipEmpty())) {
    request.add_keys(std::string(k));
  }
  absl::StatusOr<uint64_t> updated = inv.Connect()->DeletePayload(request);
  return PrintUpdated(updated, ids.size(), inv.json);
}

int RunCompact(Invocation& inv) {
  return PrintInfoResult(inv.Connect()->Compact(inv.args[0]), inv.json);
}

int RunHealth(Invocation& inv) {
  const std::string service = inv.args.empty() ? "" : inv.args[0];
  absl::StatusOr<std::string> status = inv.Connect()->Health(service);
  if (!status.ok()) return Fail(status.status());
  if (inv.json) {
    absl::PrintF("{\"status\":%s}\n", ::zoom::JsonQuote(*status));
  } else {
    absl::PrintF("%s\n", *status);
  }
  return *status == "SERVING" ? kExitOk : kExitError;
}

void PrintSnapshot(const v1::SnapshotInfo& s) {
  absl::PrintF("%s  %s  %d points  %d bytes  sha256 %s\n", s.collection(), s.name(), s.points(),
               s.size_bytes(), s.sha256());
}

int RunSnapshot(Invocation& inv) {
  const std::string sub = inv.args[0];
  const size_t n = inv.args.size();
  auto need = [&](size_t want, const char* synopsis) {
    return n == want ? 0 : UsageError(absl::StrCat("usage: zoomctl snapshot ", synopsis));
  };
  if (sub == "create") {
    if (int rc = need(2, "create NAME")) return rc;
    auto s = inv.Connect()->CreateSnapshot(inv.args[1]);
    if (!s.ok()) return Fail(s.status());
    if (inv.json) return PrintJson(*s);
    PrintSnapshot(*s);
    return kExitOk;
  }
  if (sub == "list") {
    if (int rc = need(2, "list NAME")) return rc;
    auto list = inv.Connect()->ListSnapshots(inv.args[1]);
    if (!list.ok()) return Fail(list.status());
    if (inv.json) {
      v1::ListSnapshotsResponse r;
      for (const auto& s : *list) *r.add_snapshots() = s;
      return PrintJson(r);
    }
    for (const auto& s : *list) PrintSnapshot(s);
    return kExitOk;
  }
  if (sub == "download") {
    if (int rc = need(4, "download NAME SNAPSHOT FILE")) return rc;
    auto s = inv.Connect()->DownloadSnapshot(inv.args[1], inv.args[2], inv.args[3]);
    if (!s.ok()) return Fail(s.status());
    if (inv.json) return PrintJson(*s);
    absl::PrintF("downloaded %s (%d bytes) to %s\n", s->name(), s->size_bytes(), inv.args[3]);
    return kExitOk;
  }
  if (sub == "restore") {
    const std::string source = absl::GetFlag(FLAGS_source);
    const bool overwrite = absl::GetFlag(FLAGS_overwrite);
    absl::StatusOr<v1::CollectionInfo> info;
    if (!source.empty()) {
      if (int rc = need(2, "restore NAME --source COLL/SNAP.zsnap [--overwrite]")) return rc;
      info = inv.Connect()->RestoreSnapshotFromServer(inv.args[1], source, overwrite);
    } else {
      if (int rc = need(3, "restore NAME FILE [--overwrite]")) return rc;
      info = inv.Connect()->RestoreSnapshotFromFile(inv.args[1], inv.args[2], overwrite);
    }
    return PrintInfoResult(info, inv.json);
  }
  if (sub == "delete") {
    if (int rc = need(3, "delete NAME SNAPSHOT")) return rc;
    absl::Status st = inv.Connect()->DeleteSnapshot(inv.args[1], inv.args[2]);
    if (!st.ok()) return Fail(st);
    if (!inv.json) absl::PrintF("deleted %s\n", inv.args[2]);
    return kExitOk;
  }
  return UsageError(absl::StrCat("unknown snapshot command '", sub,
                                 "': create, list, download, restore or delete"));
}

struct Command {
  const char* name;
  int (*run)(Invocation&);
  size_t min_args;
  size_t max_args;  // SIZE_MAX: any number
  const char* synopsis;
};

constexpr size_t kAny = SIZE_MAX;

constexpr Command kCommands[] = {
    {"create", RunCreate, 1, 1,
     "create NAME --dim D --metric l2|ip|cosine ..."},
    {"list", RunList, 0, 0, "list"},
    {"info", RunInfo, 1, 1, "info NAME"},
    {"drop", RunDrop, 1, 1, "drop NAME"},
    {"import", RunImport, 2, 2, "import NAME FILE.{fvecs,bvecs}"},
    {"build", RunBuild, 1, 1, "build NAME [--wait]"},
    {"search", RunSearch, 1, 1,
     "search NAME (--query_file FILE --row I | --vector 'x,y,...') --k K"},
    {"count", RunCount, 1, 1, "count NAME [--filter JSON]"},
    {"index-field", RunIndexField, 2, 2, "index-field NAME FIELD --type TYPE [--wait]"},
    {"delete-index-field", RunDeleteIndexField, 2, 2, "delete-index-field NAME FIELD"},
    {"get", RunGet, 2, kAny, "get NAME ID..."},
    {"delete", RunDelete, 1, kAny, "delete NAME (ID... | --filter JSON [--all] | --all)"},
    {"scroll", RunScroll, 1, 1, "scroll NAME [--filter JSON] [--offset ID] [--limit N]"},
    {"upsert", RunUpsert, 2, 2, "upsert NAME ID --vector 'x,y,...'"},
    {"set-payload", RunSetPayload, 2, kAny, "set-payload NAME ID... --fields JSON"},
    {"delete-payload", RunDeletePayload, 2, kAny, "delete-payload NAME ID... [--keys a,b]"},
    {"compact", RunCompact, 1, 1, "compact NAME"},
    {"snapshot", RunSnapshot, 2, 4, "snapshot create|list|download|restore|delete NAME ..."},
    {"health", RunHealth, 0, 1, "health [SERVICE]"},
};

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  FlagScan scan = ScanFlags(argc, argv);
  if (scan.help) {
    absl::PrintF("%s", kUsage);
    return kExitOk;
  }
  if (!scan.defer_to_absl && !scan.error.empty()) {
    return UsageError(scan.error);
  }
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() < 2) {
    return UsageError("missing COMMAND");
  }
  const std::string command_name = positional[1];
  if (command_name == "help") {
    absl::PrintF("%s", kUsage);
    return kExitOk;
  }
  const Command* command = nullptr;
  for (const Command& c : kCommands) {
    if (command_name == c.name) command = &c;
  }
  if (command == nullptr) {
    return UsageError(absl::StrCat("unknown command '", command_name, "'"));
  }

  Invocation inv;
  inv.args.assign(positional.begin() + 2, positional.end());
  if (inv.args.size() < command->min_args) {
    return UsageError(
        absl::StrCat("missing argument; usage: zoomctl ", command->synopsis));
  }
  if (inv.args.size() > command->max_args) {
    return UsageError(absl::StrCat("too many arguments for '", command_name,
                                   "'; usage: zoomctl ", command->synopsis));
  }
  inv.given = std::move(scan.given);
  inv.json = absl::GetFlag(FLAGS_json);
  inv.target = absl::GetFlag(FLAGS_target);
  if (inv.target.empty()) return UsageError("--target is empty");

  const double timeout = absl::GetFlag(FLAGS_timeout);
  if (std::isnan(timeout) || timeout < 0) {
    return UsageError("--timeout must be a number of seconds >= 0");
  }
  inv.options.timeout = timeout == 0 || std::isinf(timeout)
                            ? absl::InfiniteDuration()
                            : absl::Seconds(timeout);
  // A bulk load or a waited-for build may well outlast the default deadline.
  const bool long_running =
      command->run == RunImport || command->run == RunSnapshot ||
      (command->run == RunBuild && absl::GetFlag(FLAGS_wait));
  if (long_running && !inv.Given("timeout")) {
    inv.options.timeout = absl::InfiniteDuration();
  }
  inv.options.wait_for_ready = absl::GetFlag(FLAGS_wait_for_ready);
  if (absl::Status st = ApplyConnectionFlags(&inv.options); !st.ok()) {
    return UsageError(st.message());
  }
  if (auto channel = MakeChannel(inv.target, inv.options); !channel.ok()) {
    return UsageError(channel.status().message());
  }
  return command->run(inv);
}

}  // namespace
}  // namespace zoom::client

int main(int argc, char** argv) { return zoom::client::Main(argc, argv); }
