// File: server/cluster/versioned_apply.h
//
// Write versions: what makes applying a shard's log again harmless. Every
// entry a replica applies has a write version (a u64), and the replica
// keeps, per point, the version of the last full write it applied to it
// (an upsert, or a delete: then kept as the point's tombstone), and its
// payload edits per field (MetadataStore 'w' keys, carried by snapshots).
// An entry writes only what no newer write wrote (below), so
// an old entry applied after newer ones (a copy a log repair published
// again, a log that JetStream rewrote under the replicas after a power
// failure) changes nothing the newer ones wrote, and replicas that applied
// the same entries in different orders hold the same points.
//
// The version of an entry (ShardReplica): a copy published by a log
// repair carries its original's (LogEntry::version); any other gets
// max(the replica's log version + 1, the time the stream stored it, in
// ns), and the replica's log version becomes the larger of the two. Along
// one log every replica derives the same versions, increasing in log
// order; and a write the log takes after losing a tail to a power failure
// is stored seconds after the lost entries were, so it is newer than every
// one of them (the assumption: the stream's servers' clocks differ by less
// than the outage lasts).
//
// Per operation, with v the entry's version, k a point's kept version (of
// its last full write) and its field edits E (server/engine/field_edits.h:
// per field the version that last set or removed it, and the version of
// the last edit that replaced every field):
//   upsert          the points with k <= v are written, with the edits of
//                   E newer than v over the upsert's fields; then k = v
//                   and E keeps only the edits newer than v
//   delete          the ids with k <= v are deleted; then k = v for each
//                   (a tombstone, also for an id that was absent), E as
//                   for an upsert
//   set/delete payload  for the ids with k <= v, each field no newer edit
//                   wrote takes it (recorded in E; one that replaces
//                   every field also clears what E held older), and the
//                   points that exist are edited so; k is unchanged (an
//                   edit of an absent point stays in E: an older upsert
//                   of it may still come, and then takes it)
//   field indexes   applied as they are (not per point)
// (k == v is the same entry applied again after a crash: applied.) So the
// points a replica holds depend on which writes it applied, not on their
// order or how often.
// Versions are written after the collection's write succeeds: a crash
// between them applies the entry again, and a write the collection
// refuses (as every replica does) leaves them as they were.
// Version 0 applies the entry as it is (ApplyLogEntry).
#ifndef ZOOM_SERVER_CLUSTER_VERSIONED_APPLY_H_
#define ZOOM_SERVER_CLUSTER_VERSIONED_APPLY_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "server/cluster/log_entry.h"
#include "server/engine/collection.h"

namespace zoom::cluster {

// Applies `entry` at write version `version` (see above). Returns what
// ApplyLogEntry returns, counted over the points it wrote. With `digest`,
// keeps it the StateDigest of the collection's records (XORs out each
// touched point's old record hash and in its new one).
absl::StatusOr<uint64_t> ApplyVersioned(const LogEntry& entry, uint64_t version,
                                        server::Collection* collection,
                                        uint64_t* digest = nullptr);

// A digest of a replica's write records (each point's version and field
// edits, tombstones included: the XOR of RecordHash over them). Replicas
// that hold the same points at the same versions have equal digests,
// whatever order they applied the writes in; the same everywhere (no
// per-process seed). Points written before versions are not in it.
uint64_t RecordHash(uint64_t id, uint64_t version, std::string_view edits);
absl::StatusOr<uint64_t> StateDigest(const server::Collection& collection);

// The state of `points` as encoded log entries at their write versions
// (upserts of those that exist, grouped by version, with the fields their
// full write gave; deletes of the absent ones that have a tombstone; an
// absent one without is left out; then each field edit at its version),
// each under about 512 KiB: what a log repair publishes for an entry
// whose bytes are gone.
absl::StatusOr<std::vector<std::string>> StateEntries(const server::Collection& collection,
                                                      const std::vector<uint64_t>& points);
// The same for every point with a write version: what a replica publishes
// when the log forked before what it retains, or before a peer's snapshot
// replaces it (so that nothing it alone holds is lost).
absl::StatusOr<std::vector<std::string>> WholeStateEntries(const server::Collection& collection);

// The versions kept for `ids` (0: none).
absl::StatusOr<std::vector<uint64_t>> WriteVersionsOf(const server::Collection& collection,
                                                      const std::vector<uint64_t>& ids);

}  // namespace zoom::cluster

#endif  // ZOOM_SERVER_CLUSTER_VERSIONED_APPLY_H_
