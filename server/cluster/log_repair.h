// File: server/cluster/log_repair.h
//
// Detects and repairs a fork of a shard's log: JetStream (nats-server 2.9
// syncs lazily) can lose an acknowledged tail to a power failure and then
// give the same stream sequences to new entries. A replica knows each
// entry it applied by its message id (RetainedLog); the log forked under
// it when the entry at its position no longer carries that id, or the
// shard's subject now ends before its position.
//
// CheckLog: one comparison at the replica's position (one request).
//
// RepairLog, with the shard's repair lock held (one replica at a time):
//   1. the fork point f: the last retained entry the log still holds
//      (binary search over the retained sequences; purged entries below
//      the floor count as held), or, when none is, the sequence the
//      replica retains from (RetainedLog::covered_from) if that is 0 or
//      below the floor; otherwise (the fork is older than what it
//      retains: a whole stream lost, a replica restored from a snapshot
//      since) the replica publishes its whole state, each point at its
//      write version (target.whole_state; versioned apply makes that
//      harmless to every replica that holds newer), and rewinds to before
//      the floor or the log's end, whichever is lower, to apply every
//      entry the log still has (FailedPrecondition without whole_state);
//   2. the log's entries on the subject after f, read with a temporary
//      consumer;
//   3. lost = the retained entries after f whose message id is not among
//      them (a copy published by an earlier repair counts: ids compare up
//      to their "~" suffix). None lost: nothing is published;
//   4. otherwise, when every lost entry is a point write applied at a
//      write version (versioned_apply.h: then the points a replica holds
//      do not depend on the order it applies entries in), a copy of each
//      lost entry at its version (an entry whose bytes it no longer keeps:
//      the current state of the points it wrote, target.state_of) is
//      published, and writes may come between;
//   4'. a lost entry applied without a version (before write versions),
//      or a field index change (not versioned), needs the order back. None lost, and no earlier repair stopped
//      half-way (a write of the log after f with no occurrence after the
//      last copy of one of the replica's entries): nothing is published;
//      otherwise, in one run that no write may come between (each publish
//      expects the previous one's sequence: PublishAfter; a write that
//      comes between restarts from 2, at most max_attempts times): copies
//      of the replica's entries after f in their order (an entry whose
//      bytes it no longer keeps: the current state of the points it wrote,
//      target.state_of, under its message id), then copies of every other
//      entry of the log after f (the writes that came after the power
//      failure), first occurrences in log order.
// The caller then rewinds the replica to f and applies the log again from
// f + 1. Why the state converges: every write kind sets or clears fields of
// points (or a whole point, or a field index), so applying a sequence S
// over the effects of entries that all reappear in S leaves what S alone
// leaves; and the lost entries, acknowledged before the failure, now
// precede in the log every write that came after it, which precede their
// own copies again.
//
// A copy of the replica's own entry carries the write version it applied
// it at (LogEntry::version; versioned_apply.h), so that applying it again
// anywhere changes no point a later write changed.
//
// Copies carry fresh message ids ("<original>~<nonce>") so the stream's
// duplicate window stores them.
#ifndef ZOOM_SERVER_CLUSTER_LOG_REPAIR_H_
#define ZOOM_SERVER_CLUSTER_LOG_REPAIR_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "server/cluster/jetstream.h"
#include "server/cluster/retained_log.h"

namespace zoom::cluster {

struct LogRepairTarget {
  std::string stream;
  std::string subject;
  // A consumer name free for the repair's reading (deleted after).
  std::string scratch_durable;
  // The shard's log floor (purged below it); empty: 0.
  std::function<absl::StatusOr<uint64_t>()> log_floor;
  // The current state of `points` as encoded log entries (upserts of those
  // that exist, a delete of the others), each small enough to publish: how
  // an entry whose bytes the replica no longer keeps is published again.
  std::function<absl::StatusOr<std::vector<std::string>>(const std::vector<uint64_t>& points)>
      state_of;
  // The replica's whole state as versioned entries (every point it holds a
  // write version for, tombstones included; versioned_apply.h): what it
  // publishes when the log forked before what it retains. Empty: such a
  // fork is FailedPrecondition (the replica restores a peer's snapshot).
  std::function<absl::StatusOr<std::vector<std::string>>()> whole_state;
  int max_attempts = 10;
};

enum class LogCheck {
  kConsistent,    // the entry at the position is the one applied (or purged)
  kUnverifiable,  // no retained record at the position (a restored snapshot)
  kForked,        // another entry there, or the subject ends before it
};

struct LogVerdict {
  LogCheck check = LogCheck::kConsistent;
  std::string detail;  // what was found (kForked)
};

absl::StatusOr<LogVerdict> CheckLog(const JetStream& js, const LogRepairTarget& target,
                                    const RetainedLog& retained, uint64_t position);
// The same given the id applied at `position` (nullopt: none retained),
// touching no RetainedLog: may run beside the replica's writer.
// With no id (nothing retained at the position: a restored snapshot) only
// the log's end is checked: kForked when it ends before the position,
// else kUnverifiable.
absl::StatusOr<LogVerdict> CheckLogAt(const JetStream& js, const LogRepairTarget& target,
                                      uint64_t position, const std::optional<std::string>& id);

struct LogRepairResult {
  uint64_t fork_point = 0;   // the last sequence still shared with the log
  uint64_t republished = 0;  // lost entries published again
  uint64_t copied = 0;       // later entries copied after them
  bool whole_state = false;  // the replica's whole state was published
};

// FailedPrecondition when no retained entry is still in the log (the fork
// is older than the retention: restore a peer's snapshot); Aborted when
// writes kept coming between the copies max_attempts times; Unavailable
// for the log's own errors.
absl::StatusOr<LogRepairResult> RepairLog(JetStream* js, const LogRepairTarget& target,
                                          const RetainedLog& retained, uint64_t position);

// The message id a copy was made from ("a~b" -> "a").
std::string_view OriginalId(std::string_view id);

}  // namespace zoom::cluster

#endif  // ZOOM_SERVER_CLUSTER_LOG_REPAIR_H_
