#include "server/engine/compactor.h"

#include <algorithm>
#include <atomic>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/engine/index_builder.h"

namespace zoom::server {

absl::StatusOr<std::shared_ptr<Segment>> CopyLiveRecords(
    const std::string& dir, const CompactionPlan& plan, const CollectionConfig& config,
    const CompactorOptions& options, storage::MetadataStore* metadata,
    const std::atomic<bool>& stop, const absl::Status& stop_error) {
  const std::string path = (std::filesystem::path(dir) / plan.vectors_file).string();
  const storage::VectorStore& src = plan.old->store();
  const size_t rb = src.record_bytes();
  const uint64_t n = plan.live_ids.size();
  {
    // Written with batched syncs (one at the end), then opened as a segment.
    storage::VectorStoreOptions wopts = options.store;
    wopts.sync_on_append = false;
    ZOOM_ASSIGN_OR_RETURN(auto writer,
                          storage::VectorStore::Create(path, config.dim, config.dtype, wopts));
    std::vector<uint8_t> raw;
    std::vector<std::string> payloads;
    std::vector<storage::RecordWrite> writes;
    for (uint64_t first = 0; first < n; first += 4096) {
      if (stop.load()) return stop_error;
      if (options.cancel != nullptr && options.cancel->load()) {
        return absl::CancelledError("the compaction was cancelled (the server is closing)");
      }
      const uint64_t m = std::min<uint64_t>(4096, n - first);
      absl::Span<const InternalId> chunk(plan.live_ids.data() + first, m);
      raw.resize(m * rb);
      ZOOM_RETURN_IF_ERROR(src.ReadRaw(chunk, raw.data()));
      ZOOM_RETURN_IF_ERROR(writer->Append(raw.data(), m));
      // A record deleted since the plan has no payload any more: it is
      // copied as is and killed by CatchUp.
      ZOOM_RETURN_IF_ERROR(metadata->GetPayloads(plan.old->space(), chunk, &payloads));
      writes.resize(m);
      for (uint64_t i = 0; i < m; ++i) {
        writes[i] = {static_cast<InternalId>(first + i), plan.old->External(chunk[i]),
                     payloads[i]};
      }
      ZOOM_RETURN_IF_ERROR(metadata->Commit(plan.space, writes, {}));
    }
    ZOOM_RETURN_IF_ERROR(writer->Sync());
    writer.reset();
    ZOOM_ASSIGN_OR_RETURN(auto fresh,
                          Segment::Open(dir, plan.vectors_file, plan.space, /*create=*/false,
                                        config, options.store, options.engine, metadata,
                                        plan.old->collection_id()));
    if (plan.rebuild_index) {
      // Saved as the new segment's snapshot; CatchUp's records are
      // replayed after it.
      // Built from the new file, as a collection's build is (ivf_hnsw_pq
      // streams it: the live vectors are never all in RAM).
      std::atomic<double> progress{0};
      const std::shared_ptr<const index::VectorIndex> old_index =
          plan.keep_quantizer ? plan.old->index() : nullptr;
      ZOOM_ASSIGN_OR_RETURN(auto idx, BuildSegmentIndex(config, options.build_threads, *fresh, n,
                                                        &progress, nullptr, old_index.get(),
                                                        options.cancel));
      ZOOM_RETURN_IF_ERROR(fresh->SetIndex(std::move(idx)));
      ZOOM_RETURN_IF_ERROR(fresh->index()->Save(
          (std::filesystem::path(dir) / plan.snapshot_file).string(), options.store.file_system));
    }
    if (stop.load()) return stop_error;
    return fresh;
  }
}

absl::Status CatchUp(const CompactionPlan& plan, Segment* fresh, storage::MetadataStore* metadata,
                     uint64_t* added_out, uint64_t* removed_out) {
  const Segment& old = *plan.old;
  const uint64_t n = plan.live_ids.size();
  // (a) Copied records deleted or overwritten since: dead in the new one.
  std::vector<InternalId> killed;
  for (uint64_t i = 0; i < n; ++i) {
    if (old.IsDead(plan.live_ids[i])) killed.push_back(static_cast<InternalId>(i));
  }
  // (b) Records added since (live ones): appended to the new one.
  const uint64_t now_visible = old.visible();
  std::vector<InternalId> added;
  for (uint64_t i = plan.visible; i < now_visible; ++i) {
    if (!old.IsDead(static_cast<InternalId>(i))) added.push_back(static_cast<InternalId>(i));
  }
  *added_out = added.size();
  *removed_out = killed.size();
  if (killed.empty() && added.empty()) return absl::OkStatus();
  std::vector<float> vectors(added.size() * old.store().dim());
  std::vector<std::string> payloads;
  std::vector<uint64_t> externals(added.size());
  if (!added.empty()) {
    ZOOM_RETURN_IF_ERROR(old.store().ReadVectors(added, vectors.data()));
    ZOOM_RETURN_IF_ERROR(metadata->GetPayloads(old.space(), added, &payloads));
  }
  for (size_t i = 0; i < added.size(); ++i) externals[i] = old.External(added[i]);
  return fresh->AppendRecords(vectors, externals, payloads, killed);
}

}  // namespace zoom::server
