#include "server/cluster/router/cluster_snapshots.h"

#include <atomic>
#include <filesystem>
#include <fstream>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/engine/key_value_text.h"
#include "storage/snapshot_archive.h"

namespace zoom::server::router {

namespace fs = std::filesystem;

namespace {

absl::Status FromGrpc(const grpc::Status& st, absl::string_view what) {
  if (st.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                      absl::StrCat(what, ": ", st.error_message()));
}

void Prepare(grpc::ClientContext* ctx, const api::Call& call,
             absl::Time deadline) {
  ctx->set_deadline(absl::ToChronoTime(deadline));
  for (const auto& [key, value] : call.credentials)
    ctx->AddMetadata(key, value);
}

}  // namespace

ClusterSnapshots::~ClusterSnapshots() = default;

absl::StatusOr<Database*> ClusterSnapshots::Store() {
  absl::MutexLock l(&mu_);
  if (store_ == nullptr) {
    DatabaseOptions o = store_options_;
    o.maintenance_interval = absl::ZeroDuration();
    absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(o);
    if (!db.ok()) {
      return absl::Status(
          db.status().code(),
          absl::StrCat("the router's snapshots directory (--data_dir ",
                       o.data_dir, "): ", db.status().message()));
    }
    store_ = std::move(*db);
  }
  return store_.get();
}

absl::StatusOr<DatabaseOptions> ClusterSnapshots::ScratchOptions() {
  ZOOM_ASSIGN_OR_RETURN(Database * store, Store());
  DatabaseOptions o = store->options();
  o.data_dir = store->snapshots_dir() + "/.incoming";
  return o;
}

absl::Status ClusterSnapshots::FetchShard(const api::Call& call,
                                          const Candidate& c,
                                          const std::string& local,
                                          const std::string& dest,
                                          api::ClusterSnapshotShard* part) {
  const absl::Time deadline = core_->AdminDeadline(call);
  auto stub = core_->NodeStub(c.address);
  v1::SnapshotInfo made;
  {
    grpc::ClientContext ctx;
    Prepare(&ctx, call, deadline);
    v1::CreateSnapshotRequest req;
    req.set_collection(local);
    v1::CreateSnapshotResponse resp;
    ZOOM_RETURN_IF_ERROR(
        FromGrpc(stub->CreateSnapshot(&ctx, req, &resp), "CreateSnapshot"));
    made = resp.snapshot();
  }
  // The replica's archive is removed on its node whatever happens here.
  absl::Cleanup remove_there = [&] {
    grpc::ClientContext ctx;
    Prepare(&ctx, call, std::min(deadline, absl::Now() + absl::Seconds(10)));
    v1::DeleteSnapshotRequest req;
    req.set_collection(local);
    req.set_name(made.name());
    v1::DeleteSnapshotResponse resp;
    (void)stub->DeleteSnapshot(&ctx, req, &resp);
  };
  FileSystem& files = store_options_.collection.store.file_system != nullptr
                          ? *store_options_.collection.store.file_system
                          : *FileSystem::Posix();
  {
    ZOOM_ASSIGN_OR_RETURN(std::unique_ptr<File> out,
                          files.Open(dest, FileSystem::Mode::kCreateNew));
    grpc::ClientContext ctx;
    Prepare(&ctx, call, deadline);
    v1::DownloadSnapshotRequest req;
    req.set_collection(local);
    req.set_name(made.name());
    auto reader = stub->DownloadSnapshot(&ctx, req);
    v1::SnapshotChunk chunk;
    uint64_t received = 0;
    absl::Status st;
    while (reader->Read(&chunk)) {
      if (!st.ok())
        continue;  // drained after a failure (the stream's contract)
      if (chunk.offset() != received) {
        st = absl::DataLossError("the snapshot's chunks came out of order");
      } else {
        st = out->PWrite(received, chunk.data().data(), chunk.data().size());
        received += chunk.data().size();
      }
      if (!st.ok()) ctx.TryCancel();
    }
    const grpc::Status finished = reader->Finish();
    ZOOM_RETURN_IF_ERROR(st);
    ZOOM_RETURN_IF_ERROR(FromGrpc(finished, "DownloadSnapshot"));
    if (received != made.size_bytes()) {
      return absl::DataLossError(absl::StrCat("received ", received, " of ",
                                              made.size_bytes(), " bytes"));
    }
    ZOOM_RETURN_IF_ERROR(out->Sync());
    ZOOM_RETURN_IF_ERROR(out->Close());
  }
  // Verified whole here: what goes into the cluster archive is sound.
  ZOOM_ASSIGN_OR_RETURN(auto archive, storage::ArchiveReader::Open(dest));
  // With a key, the nodes sign with it too (one key for the cluster).
  ZOOM_RETURN_IF_ERROR(archive->CheckSignature(store_options_.collection.snapshot_key.get()));
  if (archive->file_sha256() != made.sha256()) {
    return absl::DataLossError(
        "the archive's SHA-256 is not the one its node reported");
  }
  ZOOM_ASSIGN_OR_RETURN(std::string manifest_text,
                        archive->Read("manifest", 1 << 16));
  ZOOM_ASSIGN_OR_RETURN(
      KeyValueText manifest,
      KeyValueText::Parse(manifest_text, "a shard snapshot's manifest"));
  part->sequence = 0;
  ZOOM_RETURN_IF_ERROR(manifest.Number("log_position", &part->sequence));
  part->node = c.node;
  part->points = made.points();
  part->records = made.records();
  part->bytes = archive->bytes();
  part->sha256 = archive->file_sha256();
  return absl::OkStatus();
}

absl::StatusOr<SnapshotInfo> ClusterSnapshots::Create(
    const api::Call& call, const cluster::VersionedShardMap& vm,
    const std::vector<std::vector<Candidate>>& at_head,
    const std::vector<uint64_t>& heads) {
  const cluster::ShardMap& m = vm.map;
  ZOOM_ASSIGN_OR_RETURN(Database * store, Store());
  static std::atomic<uint64_t> seq{0};
  const std::string dir =
      absl::StrCat(store->snapshots_dir(), "/.incoming/cluster-",
                   absl::ToUnixMicros(absl::Now()), "-", seq++);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot stage the shards' archives: ", ec.message()));
  }
  absl::Cleanup remove_dir = [&] {
    std::error_code rm;
    fs::remove_all(dir, rm);
  };
  api::ClusterSnapshotManifest manifest;
  manifest.collection = m.collection;
  manifest.shards = m.shards;
  manifest.replicas = m.replicas;
  manifest.created_unix_ms = absl::ToUnixMillis(absl::Now());
  manifest.parts.resize(m.shards);
  std::vector<std::string> files(m.shards);
  for (uint32_t k = 0; k < m.shards; ++k) {
    std::vector<std::string> failed;
    bool done = false;
    for (size_t i = 0; i < at_head[k].size() && !done; ++i) {
      const Candidate& c = at_head[k][i];
      files[k] = absl::StrCat(dir, "/shard-", k, "-", i, ".zsnap");
      absl::Status st =
          FetchShard(call, c, m.LocalName(k), files[k], &manifest.parts[k]);
      if (st.ok() && k < heads.size() &&
          manifest.parts[k].sequence < heads[k]) {
        st = absl::UnavailableError(absl::StrCat(
            "its archive is at log position ", manifest.parts[k].sequence,
            ", behind the head ", heads[k], " (rewound by a repair?)"));
      }
      if (st.ok()) {
        done = true;
      } else {
        failed.push_back(absl::StrCat(c.node, ": ", st.message()));
        fs::remove(files[k], ec);
        if (absl::Now() >= core_->AdminDeadline(call)) break;
      }
    }
    if (!done) {
      return absl::UnavailableError(absl::StrCat(
          "collection ", m.collection, ": no replica of shard ", k,
          " at its log's head gave its snapshot",
          failed.empty() ? ""
                         : absl::StrCat(" (", absl::StrJoin(failed, "; "), ")"),
          "; nothing was kept: ask again"));
    }
  }
  FileSystem* fsys = store->options().collection.store.file_system;
  const storage::SnapshotKey* key = store->options().collection.snapshot_key.get();
  absl::StatusOr<SnapshotInfo> info = store->CreateSnapshotWith(
      m.collection,
      [&](const std::string& path)
          -> absl::StatusOr<Collection::SnapshotStats> {
        ZOOM_ASSIGN_OR_RETURN(auto w,
                              storage::ArchiveWriter::Create(path, fsys));
        w->SignWith(key);  // the whole, shards' archives included
        ZOOM_RETURN_IF_ERROR(
            w->Add(api::kClusterManifestEntry, manifest.Encode()));
        for (uint32_t k = 0; k < m.shards; ++k) {
          std::ifstream in(files[k], std::ios::binary);
          ZOOM_RETURN_IF_ERROR(
              w->Begin(api::ClusterSnapshotManifest::EntryName(k),
                       manifest.parts[k].bytes));
          std::string buf(size_t{1} << 20, '\0');
          uint64_t left = manifest.parts[k].bytes;
          while (left > 0) {
            const size_t n =
                static_cast<size_t>(std::min<uint64_t>(left, buf.size()));
            in.read(buf.data(), static_cast<std::streamsize>(n));
            if (in.gcount() != static_cast<std::streamsize>(n)) {
              return absl::DataLossError(
                  absl::StrCat("shard ", k, "'s archive ended early"));
            }
            ZOOM_RETURN_IF_ERROR(w->Append(buf.data(), n));
            left -= n;
          }
          ZOOM_RETURN_IF_ERROR(w->End());
        }
        ZOOM_RETURN_IF_ERROR(w->Finish());
        Collection::SnapshotStats stats;
        stats.points = manifest.points();
        stats.records = manifest.records();
        stats.bytes = w->bytes();
        stats.sha256 = w->file_sha256();
        return stats;
      });
  if (info.ok()) {
    std::vector<std::string> at;
    for (uint32_t k = 0; k < m.shards; ++k) {
      at.push_back(absl::StrCat(k, "@", manifest.parts[k].sequence, " (",
                                manifest.parts[k].node, ")"));
    }
    ZOOM_LOG(INFO, "collection ", m.collection, ": cluster snapshot ",
             info->name, " of shards ", absl::StrJoin(at, ", "));
  }
  return info;
}

}  // namespace zoom::server::router
