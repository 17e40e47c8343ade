// File: server/engine/segment.h
//
// Segment: one vector file, the SearchEngine over it (preview index +
// fullview), the id space of its records (IdTracker + the RocksDB record
// space `space()`) and the typed payload indexes over them. A collection
// serves one segment at a time; compaction builds a new one and switches.
// Readers hold a shared_ptr<Segment> for the length of a call.
//
// The segment owns its operations: every write (Upsert, Delete, the
// payload edits, a compaction's catch-up) and every read (Search with the
// external-id and payload join, Match, Count, Get, Scroll) is written here,
// once. The collection (collection.h) decides which segment serves, holds
// the manifest and the locks, and sequences its background work.
//
// Thread safety: reads are const and safe from many threads, also during a
// write. Writes are the collection's one writer's: it calls them under its
// write lock, one at a time. A write is one atomic RocksDB batch; on error
// nothing of it is visible (vectors that reached the file stay dead
// records). Keyed by `collection_id` (not the record space): the typed
// fields, which compaction does not copy.
//
// Retirement: a replaced segment does no I/O when its last reader lets go
// (that may be a search thread). Its records are dropped by the
// collection's maintenance once it sees no reader holds it
// (CollectionMaintenance::ReleaseRetired); the manifest lists the space meanwhile, so
// a crash leaves nothing behind either.
#ifndef ZOOM_SERVER_ENGINE_SEGMENT_H_
#define ZOOM_SERVER_ENGINE_SEGMENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/query_stats.h"
#include "index/vector_index.h"
#include "server/engine/calibration.h"
#include "server/engine/collection_config.h"
#include "server/engine/collection_manifest.h"
#include "server/engine/filter.h"
#include "server/engine/id_tracker.h"
#include "server/engine/match_set.h"
#include "server/engine/payload_fields.h"
#include "server/engine/payload_index.h"
#include "server/engine/search_engine.h"
#include "storage/metadata_store.h"
#include "storage/vector_store.h"

namespace zoom::server {

// One point of an Upsert: `vector` holds dim floats; `fields` (may be
// null: none) its typed payload.
struct PointRef {
  uint64_t id;
  const float* vector;
  std::string_view payload;
  const PayloadFields* fields = nullptr;
};

struct PointData {
  uint64_t id = 0;
  std::vector<float> vector;  // empty unless asked for
  std::string payload;        // empty unless asked for
  PayloadFields fields;       // empty unless asked for
};

// An Upsert's points made ready outside the writer's lock: later
// duplicates dropped (the last one of an id wins), vectors copied, typed
// fields encoded. Refers to the points' payload bytes and fields (they
// outlive the batch).
struct UpsertBatch {
  UpsertBatch(absl::Span<const PointRef> points, size_t dim);
  size_t size() const { return externals.size(); }

  std::vector<float> vectors;              // size() * dim
  std::vector<uint64_t> externals;
  std::vector<std::string_view> payloads;
  std::vector<const PayloadFields*> fields;  // null: none
  std::vector<std::string> encoded;          // the fields, encoded ("": none)
};

struct CollectionSearchParams {
  // k and knobs (a knob left 0: the collection's default), exact,
  // with_vectors. The filter is set by the collection (its liveness).
  SearchParams engine;
  QueryContext context;  // the call: deadline, cancellation, allow_partial, limits
  bool with_payload = false;
  // Only points that pass it (filter.h; may be null). Evaluated from the
  // payload indexes, or from the stored payloads when a field has no ready
  // index (stats.filter_scan); the engine's planner then picks how to
  // search (QueryContext::match).
  const Filter* filter = nullptr;
  // The answer's payload and vector bytes at most (ResourceExhausted beyond,
  // found before it is all in memory).
  uint64_t max_answer_bytes = UINT64_MAX;
  // The recall@10 to aim at, in (0, 1] (0: the collection's default, see
  // CollectionConfig::default_target_recall; InvalidArgument outside
  // [0, 1]). The knobs the request leaves 0 are then the cheapest that
  // reached it in the index's calibration (the highest-recall ones when
  // none did: stats.target_reached false), K' scaled by k / 10 when k > 10
  // and ef raised to K' for hnsw_pq. The knobs the request sets are kept.
  // Without a calibration (none measured yet) the default knobs run.
  // stats.target_recall / calibrated_recall say what was chosen.
  double target_recall = 0;
};

// How many live points pass a filter (null or empty: all), and whether it
// was evaluated from the stored payloads (a scan). `live`: the live points
// `count` was taken over, from the same read (one look at each record's
// tombstone serves both), so count <= live, and count == live says that
// every point live at that read passed; without a filter both are live().
// (Readers run beside the writer: live() read on its own before or after
// the match could count a delete or an upsert the match did not see.)
struct FilterCount {
  uint64_t count = 0;
  uint64_t live = 0;
  bool scan = false;
};

class Segment : public index::IdFilter {
 public:
  // Creates an empty vector file (create) or opens one and loads its
  // records of `space` from `metadata` (the newest record of an external
  // id is live; records past the file's end are ignored with a warning).
  // DataLoss when the file's dim/dtype differ from the config's.
  // `metadata` must outlive the segment; `collection_id` keys the typed
  // fields of the collection's points.
  static absl::StatusOr<std::shared_ptr<Segment>> Open(
      const std::string& dir, const std::string& vectors_file, uint32_t space, bool create,
      const CollectionConfig& config, const storage::VectorStoreOptions& store_options,
      const EngineOptions& engine_options, storage::MetadataStore* metadata,
      uint32_t collection_id);

  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  // ---- what it is
  uint32_t space() const { return space_; }
  uint32_t collection_id() const { return collection_id_; }
  const std::string& vectors_file() const { return vectors_file_; }
  // Records in the vector file (live and dead).
  uint64_t records() const { return engine_->size(); }
  // Records a reader may see, and the live points among them.
  uint64_t visible() const { return ids_.visible(); }
  uint64_t live() const { return ids_.live(); }
  bool IsDead(InternalId id) const { return ids_.IsDead(id); }
  uint64_t External(InternalId id) const { return ids_.External(id); }
  // (internal, external) of every live point, in internal id order.
  std::vector<std::pair<InternalId, uint64_t>> LiveRecords() const { return ids_.LiveRecords(); }
  // The vector file (raw reads: compaction, snapshots, index builds).
  const storage::VectorStore& store() const { return engine_->store(); }
  // The search engine (tests, benchmarks); kept alive by the segment.
  const SearchEngine& engine() const { return *engine_; }
  // DRAM held: preview, cache, id maps, payload indexes.
  uint64_t ResidentBytes() const;
  std::vector<FieldIndexInfo> FieldIndexes() const { return payload_.Info(); }

  // A search never returns a record that is not live.
  bool IsExcluded(InternalId id) const override { return !ids_.IsLive(id); }

  // ---- the preview index
  std::shared_ptr<const index::VectorIndex> index() const { return engine_->index(); }
  // Installs a built or loaded index (records past its size are added to
  // it from the vector file).
  absl::Status SetIndex(std::unique_ptr<index::VectorIndex> index);
  // Adds to `index` (not serving yet) the records past its size
  // (SearchEngine::CatchUp): beside the writer, without its lock.
  absl::Status CatchUpIndex(index::VectorIndex* index) const;
  // The recall curve of the serving index (calibration.h).
  absl::StatusOr<Calibration> Calibrate(const CalibrationOptions& options) const;

  // ---- writes (the collection's one writer, under its write lock)
  // Inserts or replaces the points (the old record of a replaced point
  // dies; its typed fields are replaced too). ResourceExhausted past 2^32
  // records or for a full disk.
  absl::Status Upsert(const UpsertBatch& batch);
  // Deletes the live points of `ids` (repeats allowed) with their fields;
  // how many were live.
  absl::StatusOr<uint64_t> Delete(absl::Span<const uint64_t> ids);
  // Deletes those of `points` (external, internal) whose record is still
  // the one given (not rewritten, not deleted since): DeleteByFilter's
  // batch after an evaluation without the lock. How many.
  absl::StatusOr<uint64_t> DeleteIfUnchanged(
      absl::Span<const std::pair<uint64_t, InternalId>> points);
  // The typed fields of the points of `ids` that exist: `change` edits each
  // point's (returns whether it changed them); the changed ones are
  // committed in batches of 256 points (an error after one says how many
  // changed before it). InvalidArgument when an edit leaves fields
  // ValidateFields refuses. Counts edits() up. How many points changed.
  absl::StatusOr<uint64_t> EditFields(absl::Span<const uint64_t> ids,
                                      const std::function<bool(PayloadFields*)>& change);
  // Payload edits in place so far (the points keep their records): a
  // filter evaluated before an edit may be stale.
  uint64_t edits() const { return edits_.load(std::memory_order_acquire); }
  // A compaction's catch-up: appends `vectors` (dim floats each) as new
  // records of `externals` with `payloads`, and kills the records `killed`
  // (no typed fields: they are the collection's, kept).
  absl::Status AppendRecords(absl::Span<const float> vectors,
                             absl::Span<const uint64_t> externals,
                             absl::Span<const std::string> payloads,
                             absl::Span<const InternalId> killed);

  // ---- payload indexes (declared by the collection's manifest)
  // Declares the fields of `declared`, ready, and fills them from every
  // stored point's fields (at open, and a compaction's new segment).
  absl::Status FillFieldIndexes(const std::vector<CollectionManifest::FieldIndex>& declared);
  // Declares an index of `field`, not ready: writes keep it current from
  // now on, FillFieldStep fills in the rest. Its generation.
  uint64_t DeclareField(const std::string& field, FieldIndexType type) {
    return payload_.AddField(field, type, /*ready=*/false);
  }
  bool FieldReady(const std::string& field) const { return payload_.IsReady(field); }
  void RemoveField(const std::string& field) { payload_.RemoveField(field); }
  // One step of the build of `field` (declared at `generation`): up to
  // 4,096 stored points from external id *from on filled in, *from and
  // *points advanced. *done once none are left (the index is then marked
  // ready) or the field is not that declaration's any more (deleted or
  // declared again). Under the writer's lock: writers update the index
  // between steps.
  absl::Status FillFieldStep(const std::string& field, uint64_t generation, uint64_t* from,
                             uint64_t* points, bool* done);

  // ---- reads (const, thread-safe)
  // The live points that pass `filter` (a valid one: ValidateFilter, as
  // Count, Scroll and Search check their own), from the payload
  // indexes or (*scan) from the stored payloads; a scan stops at ctx's
  // deadline or cancellation (ctx may be null).
  absl::Status Match(const Filter& filter, MatchSet* out, bool* scan,
                     const QueryContext* ctx = nullptr) const;
  absl::StatusOr<FilterCount> Count(const Filter* filter) const;
  // A field `filter` names that has no ready payload index now (the first
  // found), "" if every one has.
  std::string UnindexedField(const Filter& filter) const;
  // The points of `ids` that exist, in request order (an id given twice is
  // answered twice, read once). ResourceExhausted when the answer's vectors
  // and payloads would pass `max_answer_bytes` (found before it is built).
  absl::Status Get(absl::Span<const uint64_t> ids, bool with_vectors, bool with_payload,
                   std::vector<PointData>* out, uint64_t max_answer_bytes) const;
  // One page of the live points passing `filter` (null: all), ascending by
  // id: at most `limit` with id >= `offset`, as Get's; *next is the first
  // id of the next page, if any.
  absl::Status Scroll(const Filter* filter, uint64_t offset, uint32_t limit, bool with_vectors,
                      bool with_payload, std::vector<PointData>* out,
                      std::optional<uint64_t>* next, bool* scan,
                      uint64_t max_answer_bytes) const;
  // nq queries (dim floats each) with `knobs` (chosen by the collection)
  // and params' filter, payloads and answer budget (the batch's): the
  // engine's hits as the collection's (external ids, payloads when asked),
  // stats.filter_scan set. nq == 1 runs SearchEngine::Search, more
  // SearchEngine::SearchBatch (pipelined on this thread). A query's error
  // is "query #i: ..." when nq > 1.
  absl::Status Search(absl::Span<const float> queries, size_t nq, const SearchParams& knobs,
                      const CollectionSearchParams& params,
                      std::vector<QueryResult>* results) const;
  absl::Status Search(absl::Span<const float> query, const SearchParams& knobs,
                      const CollectionSearchParams& params, QueryResult* result) const;

  // Every stored point's typed fields, decoded, in batches of 1024:
  // each(external id, its live record, fields) for those with a live
  // record, then after_batch(points in the batch) (its error stops the
  // scan).
  absl::Status ScanStoredFields(
      const std::function<void(uint64_t, InternalId, const PayloadFields&)>& each,
      const std::function<absl::Status(uint64_t)>& after_batch) const;

 private:
  Segment() = default;
  // The query's context: params.context with what it runs over (this
  // segment's liveness filter and live count, and the filter of `params`
  // evaluated into *match, when it has one).
  absl::Status Prepare(const CollectionSearchParams& params, MatchSet* match,
                       QueryContext* ctx, bool* scan) const;
  // The engine's answer as the collection's: external ids, and payloads
  // when asked, their bytes and the vectors' taken from *budget
  // (ResourceExhausted beyond).
  absl::Status JoinHits(const CollectionSearchParams& params, uint64_t* budget,
                        QueryResult* result) const;
  // The payloads and typed fields of the points `external`, each read
  // from the record that was its live one at one moment: *ids (their
  // records as the caller found them) is set to those records, and
  // (*gone)[i] to whether point i was deleted by then (its payload then
  // empty). A writer replaces a record and erases the old one's payload in
  // one commit, so a payload read by a record found before it would come
  // back empty: reads that overlap a commit (commits_ changed) are read
  // again, and after a few tries under commit_mu_ (Get leaves a point
  // deleted meanwhile out; a search keeps it as a hit without a payload:
  // it was live when searched). Their bytes are taken
  // from *budget; ResourceExhausted once it would go below zero.
  absl::Status ReadPayloadsWithin(std::vector<InternalId>* ids,
                                  absl::Span<const uint64_t> external, uint64_t* budget,
                                  std::vector<std::string>* payloads,
                                  std::vector<PayloadFields>* fields,
                                  std::vector<bool>* gone) const;
  // Kills `erased` and commits `writes` (new records, already in the
  // vector file at [base, base + writes.size())) and `fields`, then makes
  // them visible.
  absl::Status CommitRecords(uint64_t base, absl::Span<const storage::RecordWrite> writes,
                             absl::Span<const InternalId> erased,
                             absl::Span<const storage::FieldsWrite> fields,
                             absl::Span<const PayloadFields* const> typed);

  uint32_t space_ = 0;
  uint32_t collection_id_ = 0;
  std::string vectors_file_;  // name inside the collection's directory
  std::string name_;          // the collection's (logs)
  size_t dim_ = 0;
  storage::MetadataStore* metadata_ = nullptr;
  std::unique_ptr<SearchEngine> engine_;
  IdTracker ids_;
  PayloadIndex payload_;
  std::atomic<uint64_t> edits_{0};
  // Record commits (CommitRecords, Delete): odd while one is between its
  // metadata commit and the id map's update; commit_mu_ held across it
  // (ReadPayloadsWithin's last resort).
  std::atomic<uint64_t> commits_{0};
  mutable absl::Mutex commit_mu_;
};

}  // namespace zoom::server

#endif  // ZOOM_SERVER_ENGINE_SEGMENT_H_
