// zoombench --benchmarks=collection: Collection::Search in process over a
// collection that zoomd wrote (its data dir opened by server::Database, the
// server stopped), at 1..16 concurrent callers: the in-process half of the
// service's cost per call. zoomload --workload grpc makes the collection
// (imports the data set through gRPC and builds the index) and measures the
// same queries with the same knobs through gRPC; loadtest/grpc_overhead.py
// runs the two alternately and prints them side by side.
//
//   zoombench --benchmarks=collection --dataset ../shared/data/glove-6b-100d
//       --collection_dir /var/tmp/zoomload-grpc --max_queries 2000
//
// Parts (--collection_parts): floor (a preview-only search, RAM only, one
// caller: its p50) and search (every query once at each
// --collection_concurrency: recall@10, QPS, p50/p99, SSD reads and the
// process's CPU time per query).
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/bench_dataset.h"
#include "bench/bench_util.h"
#include "common/process.h"
#include "common/status_macros.h"
#include "common/timer.h"
#include "server/engine/collection.h"
#include "server/engine/database.h"

ABSL_FLAG(std::string, collection_dir, "/var/tmp/zoomload-grpc",
          "collection: the data dir of a stopped zoomd holding the collection (zoomload "
          "--workload grpc's --grpc_work_dir)");
ABSL_FLAG(std::string, collection_name, "bench", "collection: the collection searched");
ABSL_FLAG(std::string, collection_concurrency, "1,2,4,8,16",
          "collection: concurrent callers of Collection::Search");
ABSL_FLAG(std::string, collection_parts, "floor,search",
          "collection: the parts to run (floor, search; always in this order)");
ABSL_FLAG(int32_t, collection_ef, 0, "collection: ef (0: the collection's default)");
ABSL_FLAG(int32_t, collection_nprobe, 0, "collection: nprobe (0: the collection's default)");
ABSL_FLAG(int32_t, collection_rerank, 0,
          "collection: rerank_candidates, K' (0: the collection's default)");

namespace zoom::bench {
namespace {

class CollectionWorkload : public Workload {
 public:
  absl::Status Setup() override;
  absl::Status Run(JsonLines& rep) override;
  absl::Status Report(JsonLines& rep) override;

 private:
  bool Wants(const std::string& part) const {
    return std::find(parts_.begin(), parts_.end(), part) != parts_.end();
  }
  // Collection::Search of query q with the flags' knobs.
  SearchFn Search(bool preview_only) const;

  std::vector<std::string> parts_;
  std::vector<int> concurrency_;
  size_t k_ = 10;
  Dataset ds_;
  std::unique_ptr<server::Database> db_;
  std::shared_ptr<server::Collection> collection_;
};

absl::Status CollectionWorkload::Setup() {
  parts_ = absl::StrSplit(absl::GetFlag(FLAGS_collection_parts), ',', absl::SkipEmpty());
  for (const std::string& p : parts_) {
    if (p != "floor" && p != "search") {
      return absl::InvalidArgumentError(
          absl::StrCat("bad --collection_parts '", p, "': expected floor, search"));
    }
  }
  ZOOM_ASSIGN_OR_RETURN(concurrency_, ParseIntList(absl::GetFlag(FLAGS_collection_concurrency)));
  k_ = absl::GetFlag(FLAGS_k);
  const std::string dir = DatasetDirFlag();
  ZOOM_ASSIGN_OR_RETURN(const Metric metric, MetricFlag(dir));
  ZOOM_ASSIGN_OR_RETURN(ds_, LoadDataset(dir, metric, absl::GetFlag(FLAGS_max_queries)));
  server::DatabaseOptions options;
  options.data_dir = absl::GetFlag(FLAGS_collection_dir);
  options.collection.auto_build_min_points = 0;  // as zoomload's zoomd: never builds by itself
  Stopwatch sw;
  ZOOM_ASSIGN_OR_RETURN(db_, server::Database::Open(options));
  const std::string name = absl::GetFlag(FLAGS_collection_name);
  auto collection = db_->GetCollection(name);
  if (!collection.ok()) {
    return absl::Status(collection.status().code(),
                        absl::StrCat(options.data_dir, ": ", collection.status().message(),
                                     " (make it with zoomload --workload grpc)"));
  }
  collection_ = *collection;
  const server::CollectionInfo info = collection_->Info();
  if (info.points != ds_.base.rows || info.config.dim != ds_.dim()) {
    return absl::FailedPreconditionError(
        absl::StrCat("collection '", name, "' of ", options.data_dir, " holds ", info.points,
                     " points of dimension ", info.config.dim, ", not the ", ds_.base.rows,
                     " of ", dir));
  }
  std::printf("dataset %s: collection '%s' of %s opened in process in %.1f s (%llu points, "
              "preview %.1f MiB)\n",
              ds_.name.c_str(), name.c_str(), options.data_dir.c_str(),
              sw.ElapsedMicros() / 1e6, static_cast<unsigned long long>(info.points),
              info.resident_bytes / 1048576.0);
  return absl::OkStatus();
}

SearchFn CollectionWorkload::Search(bool preview_only) const {
  const uint32_t ef = absl::GetFlag(FLAGS_collection_ef);
  const uint32_t nprobe = absl::GetFlag(FLAGS_collection_nprobe);
  const uint32_t rerank = absl::GetFlag(FLAGS_collection_rerank);
  return [this, ef, nprobe, rerank, preview_only](size_t q, size_t kk, int64_t* out,
                                                  QueryStats* stats) {
    server::CollectionSearchParams p;
    p.engine.k = kk;
    p.engine.ef = ef;
    p.engine.nprobe = nprobe;
    p.engine.rerank_candidates = preview_only ? 0 : rerank;
    p.engine.preview_only = preview_only;
    thread_local server::QueryResult r;
    ZOOM_RETURN_IF_ERROR(
        collection_->Search(absl::MakeConstSpan(ds_.queries.row(q), ds_.dim()), p, &r));
    if (stats != nullptr) stats->Merge(r.stats);
    for (size_t i = 0; i < kk; ++i) {
      out[i] = i < r.hits.size() ? static_cast<int64_t>(r.hits[i].id) : -1;
    }
    return absl::OkStatus();
  };
}

absl::Status CollectionWorkload::Run(JsonLines& rep) {
  if (Wants("floor")) {
    ZOOM_ASSIGN_OR_RETURN(const RunResult preview, RunQueries(ds_, k_, 1, Search(true)));
    std::printf("floor, 1 caller: preview-only Search in-process p50 %.0f us\n",
                preview.p50_us);
    rep.Line({{"workload", std::string("collection")},
              {"dataset", ds_.name},
              {"path", std::string("floor")},
              {"callers", int64_t{1}},
              {"preview_in_process_p50_us", preview.p50_us}});
  }
  if (!Wants("search")) return absl::OkStatus();
  // CPU us/q: this process's CPU time per query (the engine's and the
  // callers'); zoomload --workload grpc counts zoomload's and zoomd's.
  Table table({"callers", "path", "recall@10", "QPS", "p50 us", "p99 us", "reads/q",
               "CPU us/q"});
  for (int c : concurrency_) {
    ZOOM_ASSIGN_OR_RETURN(const RunResult r, RunQueries(ds_, k_, c, Search(false)));
    ServingFigures f;
    f.recall_at_10 = r.recall_at_10;
    f.qps = r.qps;
    f.p50_us = r.p50_us;
    f.p99_us = r.p99_us;
    f.reads_per_query = r.reads_per_query;
    f.cpu_us_per_query = r.cpu_us_per_query;
    ServingRow("collection", ds_.name, "in-process", "in-process", c, f, table, rep);
  }
  return absl::OkStatus();
}

absl::Status CollectionWorkload::Report(JsonLines& /*rep*/) {
  std::printf("load average (1 min) after the run: %.2f\n", LoadAverage1m());
  collection_.reset();
  db_.reset();
  return absl::OkStatus();
}

const RegisterWorkload kRegisterCollection("collection", RunWorkload<CollectionWorkload>);

}  // namespace
}  // namespace zoom::bench
