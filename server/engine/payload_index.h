// File: server/engine/payload_index.h
//
// PayloadIndex: a segment's in-RAM indexes of typed payload fields
// (declared per collection field with CreateFieldIndex), over the
// segment's internal ids, and the evaluation of a Filter (filter.h) into a
// MatchSet, the exact set of live ids that pass it.
//
// Per field, by type (the values of other types in the field are not in
// the typed structure, but still count for is_empty / is_null /
// values_count / except):
//   keyword  a Roaring bitmap per string value
//   integer  int64 values in an ordered (value, id) B-tree; a double
//            value of the field in a second one; range bins (below)
//   float    every numeric value as a double, in an ordered B-tree; range
//            bins
//   bool     two bitmaps
//   geo      (lat, id, lon) in an ordered B-tree (a latitude band, then
//            each point's exact test)
// and, for every type: bitmaps of ids with a value and with null, and the
// whole value of each id whose field is a list (for except and
// values_count; single values need none).
//
// A filter is evaluated from indexes only when every field condition in it
// has a ready index that can answer it; otherwise the caller evaluates it
// from the stored payloads (a scan) and says so. A condition an index of
// the field cannot answer (a range on a keyword field, a keyword match on
// an integer field) is InvalidArgument.
//
// Entries of dead records stay until the segment is replaced (compaction):
// the evaluation intersects with the live records (tombstones are one
// more bitmap), so a search never sees them.
//
// Thread safety: the writer's calls (Update, Fill, AddField, ...) take the
// index's lock exclusively, Evaluate and Info share it.
#ifndef ZOOM_SERVER_ENGINE_PAYLOAD_INDEX_H_
#define ZOOM_SERVER_ENGINE_PAYLOAD_INDEX_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/ids.h"
#include "index/search_types.h"
#include "server/engine/filter.h"
#include "server/engine/id_tracker.h"
#include "server/engine/match_set.h"
#include "server/engine/payload_fields.h"

namespace zoom::server {

enum class FieldIndexType : uint8_t { kKeyword = 0, kInteger = 1, kFloat = 2, kBool = 3, kGeo = 4 };
// "keyword", "integer", "float", "bool", "geo"; InvalidArgument listing them.
absl::StatusOr<FieldIndexType> ParseFieldIndexType(std::string_view name);
const char* FieldIndexTypeName(FieldIndexType type);

struct FieldIndexInfo {
  std::string field;
  FieldIndexType type = FieldIndexType::kKeyword;
  bool ready = false;     // false while its background build runs
  uint64_t points = 0;    // records with a value of the field indexed
  uint64_t bytes = 0;     // RAM of its structures (approximate for B-trees)
};

class PayloadIndex {
 public:
  // Integer and float fields keep range bins (16 bitmaps of about equal
  // count over the values) once they hold `min_binned` numeric values: a
  // range then walks the ordered values only in its two edge bins. Tests
  // pass a small number to exercise them.
  static constexpr uint64_t kDefaultMinBinned = 4096;
  explicit PayloadIndex(uint64_t min_binned = kDefaultMinBinned);
  ~PayloadIndex();
  PayloadIndex(const PayloadIndex&) = delete;
  PayloadIndex& operator=(const PayloadIndex&) = delete;

  // ---- Writer ----
  // A new, empty index of `field` (ready: already complete, e.g. at open
  // before any record is filled in). Replaces one of the field. Returns
  // its generation (a build of an older declaration of the field must not
  // mark this one ready: MarkReady and IsCurrent take it).
  uint64_t AddField(const std::string& field, FieldIndexType type, bool ready);
  void RemoveField(std::string_view field);
  // generation 0: whatever the field's generation.
  void MarkReady(std::string_view field, uint64_t generation = 0);
  // Record `id`'s fields were `before` (null: none, a new record) and are
  // now `after` (null: none): every index follows.
  void Update(InternalId id, const PayloadFields* before, const PayloadFields* after);
  // Adds record `id`'s value of `field` to that field's index only (a
  // background build; idempotent).
  void Fill(std::string_view field, InternalId id, const FieldValue& value);

  // ---- Readers ----
  bool HasField(std::string_view field) const;
  // Whether `field`'s index is the one of `generation` (AddField's).
  bool IsCurrent(std::string_view field, uint64_t generation) const;
  bool IsReady(std::string_view field) const;
  // Whether every field condition of `filter` has a ready index; *unindexed
  // names the first that has none (or whose index is building: *building).
  bool CanEvaluate(const Filter& filter, std::string* unindexed, bool* building) const;
  // The ids of live records below `size` (ids' visible records) that pass
  // `filter`, into *out. FailedPrecondition when CanEvaluate is false;
  // InvalidArgument for a condition the field's index type cannot answer.
  absl::Status Evaluate(const Filter& filter, const IdTracker& ids, uint64_t size,
                        MatchSet* out) const;
  std::vector<FieldIndexInfo> Info() const;
  uint64_t Bytes() const;

 private:
  struct Field;
  absl::Status EvalFilter(const Filter& f, const IdTracker& ids, MatchSet* out) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::Status EvalCondition(const Condition& c, const IdTracker& ids, MatchSet* out) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  bool CanEvaluateLocked(const Filter& filter, std::string* unindexed, bool* building) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<Field>, std::less<>> fields_ ABSL_GUARDED_BY(mu_);
  uint64_t generations_ ABSL_GUARDED_BY(mu_) = 0;
  const uint64_t min_binned_;
};

// The live ids of `ids` below `size` into *out (every bit of a dead or
// unpublished record cleared).
void AndLive(const IdTracker& ids, MatchSet* out);

}  // namespace zoom::server

#endif  // ZOOM_SERVER_ENGINE_PAYLOAD_INDEX_H_
