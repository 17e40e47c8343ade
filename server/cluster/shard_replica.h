// File: server/cluster/shard_replica.h
//
// ShardReplica: one replica of one shard of a clustered collection. A
// thread reads the shard's subject of the collection's stream through a
// durable pull consumer and applies each LogEntry, in stream order, to the
// local collection that holds the shard, recording the entry's stream
// sequence as the collection's log position after it
// (Collection::SetLogPosition). Replicas are symmetric state machines: no
// primary, no election; the stream's order is the only order.
//
// Where it starts: after the collection's log position (a restart goes on
// where it stopped, a collection restored from a peer's snapshot after the
// snapshot's position). Messages at or below the position are skipped (a
// redelivery).
//
// Write versions (versioned_apply.h): each entry is applied at a write
// version, its copy's or max(log version + 1, the entry's stream
// timestamp); the replica's log version (the largest so far) is kept with
// the position (Collection::SetLogPosition), in each retained record, and
// goes back with a rewind to the one after the fork point, so that every
// replica derives the same versions from the same log. An entry older
// than what a point holds does not change it: a repair's replay, or a log
// that came back different, cannot take a point back to an older state.
//
// Errors while applying:
//   * deterministic ones (InvalidArgument, NotFound, AlreadyExists,
//     FailedPrecondition, OutOfRange: every replica meets them at the same
//     entry) are logged, counted (status().skipped) and passed: the
//     position moves on, as on every other replica;
//   * an entry that cannot be decoded (DataLoss; or FailedPrecondition: a
//     newer zoomd wrote it) stops the replica (status().failed): it must
//     not apply what follows it;
//   * anything else (a full disk, an I/O error) is retried after
//     retry_wait from the same entry, as is a lost NATS connection.
//
// The log below every replica's position is purged (ClusterNode::TrimLogs).
// A consumer skips purged messages without a word, so before applying a
// batch the replica reads the shard's log floor (before every batch until
// it has caught up since it started or rewound, then at most every
// floor_check): a position below floor - 1 means entries it never applied
// may be gone, and it stops (status().behind_floor; the node restores a
// peer's snapshot instead). Only a replica absent for the node's log_hold
// (far longer than floor_check), or one that rewound while its record
// still showed its old position, can be purged past.
//
// A consumer that delivers nothing for two floor_check periods while the
// shard's log holds entries past the position is made again from it (a
// consumer whose server lost it, or whose Raft group has no leader after
// NATS servers restarted, only times out).
//
// Forks (log_repair.h): every entry is kept, by sequence and message id,
// in a RetainedLog before it is applied. For each fetched batch (beside
// its apply, and always before the batch is reported durable), and every
// verify_every while idle, the replica checks that the log still holds at
// the position before it the entry it applied there (CheckLog: one
// request). When it does not (JetStream lost an acknowledged tail to a
// power failure and gave its sequences to new entries), the replica takes
// the shard's repair lock (options.repair_lock), publishes again what the
// log lost (RepairLog), rewinds to the fork point and applies the log from
// there. A fork older than what it retains (a whole stream lost; a replica
// restored from a snapshot since, whose position the log no longer
// reaches) makes it publish its whole state at its write versions and
// rewind to before the floor (log_repair.h); without write versions it
// stops it (failed, needs_restore: the node restores a peer's snapshot).
//
// Durable positions (write concerns): after each batch it applied, the
// replica makes it durable (options.sync: null when every write is durable
// once it returns, --sync=always) and tells options.on_durable its position
// and the entries it applied (each by sequence and message id, with the
// points changed by those that count them); while idle it tells the
// position again every report_every. Notices travel on core NATS (at
// most once: a reconnect drops them), so at most once every report_every
// a report also repeats the entries reported in the last resend_for (at
// most kResendEntries): a lost notice delays a write concern by about
// report_every instead of leaving it waiting for its deadline.
//
// Thread safety: status() and WaitApplied from any thread.
#ifndef ZOOM_SERVER_CLUSTER_SHARD_REPLICA_H_
#define ZOOM_SERVER_CLUSTER_SHARD_REPLICA_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/cluster/cluster_map.h"
#include "server/cluster/jetstream.h"
#include "server/cluster/log_repair.h"
#include "server/cluster/retained_log.h"
#include "server/engine/collection.h"

namespace zoom::cluster {

struct ShardReplicaOptions {
  std::string stream;
  std::string subject;
  // The consumer's durable name: one per (node, collection, shard).
  std::string durable;
  int fetch_batch = 256;
  // How long one fetch waits for a message (also how soon Stop is seen).
  absl::Duration fetch_wait = absl::Milliseconds(250);
  // After a failed fetch or a retryable apply error.
  absl::Duration retry_wait = absl::Milliseconds(200);
  // The shard's log floor (ClusterCatalog::LogFloor); empty: not checked.
  std::function<absl::StatusOr<uint64_t>()> log_floor;
  // After a repair rewound the replica to fork point F (the log holds every
  // entry after F again): lowers the shard's floor to F + 1 if it is above
  // (ClusterCatalog::LowerLogFloor). Empty: not lowered.
  std::function<absl::Status(uint64_t floor)> lower_floor;
  absl::Duration floor_check = absl::Seconds(5);
  // Makes every write applied so far durable (null: they are when applied).
  std::function<absl::Status()> sync;
  // Told each durable position and the entries applied since the last call
  // (sequence, message id, and the points changed by those that count
  // them); again with none while idle. On the replica's thread: it must
  // not block.
  std::function<void(uint64_t durable, const std::vector<AppliedEntry>& applied)> on_durable;
  absl::Duration report_every = absl::Seconds(1);
  // How long a reported entry is repeated in later reports (see above).
  absl::Duration resend_for = absl::Seconds(10);
  // How often an idle replica checks the log at its position.
  absl::Duration verify_every = absl::Seconds(1);
  // Held while a fork is repaired (one replica of a shard at a time):
  // returns its release; empty: no lock (a lone replica, tests).
  std::function<absl::StatusOr<std::function<void()>>()> repair_lock;
  // Creates the shard's stream again when the log check finds it missing
  // (NATS lost it); empty: not done.
  std::function<absl::Status()> ensure_stream;
  // The retained records' bytes, and the entries' bytes kept in memory
  // (RetainedLog).
  uint64_t retain_bytes = RetainedLog::kDefaultMaxBytes;
  uint64_t retain_memory_bytes = RetainedLog::kDefaultMemoryBytes;
  // Told of each fork found and repair made (on the replica's thread).
  std::function<void(const LogRepairResult* repaired, const std::string& detail)> on_fork;
};

struct ReplicaStatus {
  uint64_t applied = 0;        // the log position: last stream sequence applied
  uint64_t durable = 0;        // applied and on disk (sync): what on_durable was told
  uint64_t pending = 0;        // messages after it the consumer has not delivered yet
  bool caught_up = false;      // the last fetch found nothing more (pending == 0)
  bool failed = false;         // stopped on an entry it cannot apply (last_error)
  bool behind_floor = false;   // stopped (failed): the log was purged past its position
  bool needs_restore = false;  // stopped (failed): a peer's snapshot must replace it
  uint64_t forks = 0;          // forks of the log found at its position
  uint64_t repairs = 0;        // forks repaired (rewound to the fork point)
  uint64_t republished = 0;    // entries published again by its repairs
  std::string last_fork;       // what the last fork was, and its repair
  uint64_t entries = 0;        // entries applied by this object
  uint64_t skipped = 0;        // entries refused deterministically (logged)
  std::string last_error;      // "" when the last step succeeded
  // StateDigest of the replica's write records as of `applied`
  // (versioned_apply.h): replicas at one position with equal digests hold
  // the same points at the same versions.
  uint64_t digest = 0;
};

class ShardReplica {
 public:
  // Starts applying at collection->log_position() + 1 on its own thread.
  // `js` and the collection must outlive the replica.
  static absl::StatusOr<std::unique_ptr<ShardReplica>> Start(
      JetStream* js, std::shared_ptr<server::Collection> collection, ShardReplicaOptions options);
  // Stops the thread (within about fetch_wait).
  ~ShardReplica();
  ShardReplica(const ShardReplica&) = delete;
  ShardReplica& operator=(const ShardReplica&) = delete;

  ReplicaStatus status() const;
  // Waits until the replica has applied stream sequence `sequence` (true),
  // or `deadline` passes or the replica failed (false).
  bool WaitApplied(uint64_t sequence, absl::Time deadline) const;
  const std::shared_ptr<server::Collection>& collection() const { return collection_; }
  const ShardReplicaOptions& options() const { return options_; }

 private:
  ShardReplica(JetStream* js, std::shared_ptr<server::Collection> collection,
               ShardReplicaOptions options);
  void Run();
  // Sleeps `d` unless stopped meanwhile; false when stopping.
  bool Pause(absl::Duration d);
  void SetError(const absl::Status& st);
  // Syncs (options_.sync) and reports the position and `applied`
  // (on_durable, then cleared); false when the sync failed (retried with
  // the next batch or idle pass).
  bool Report(std::vector<AppliedEntry>* applied);
  // Checks the log at the position and repairs a fork (the replica then
  // starts again from the fork point: *consumer reset). False when the
  // caller must not apply what it fetched.
  bool CheckAndRepair(std::unique_ptr<PullConsumer>* consumer);
  // Acts on the check of `position` (CheckAndRepair's second half): true
  // when the log holds what was applied there.
  bool OnVerdict(const absl::StatusOr<LogVerdict>& verdict, uint64_t position,
                 std::unique_ptr<PullConsumer>* consumer);
  // The state of `points` in the collection as log entries
  // (LogRepairTarget::state_of).
  absl::StatusOr<std::vector<std::string>> StateOf(const std::vector<uint64_t>& points) const;
  // Every point with a write version, as StateOf (LogRepairTarget::whole_state).
  absl::StatusOr<std::vector<std::string>> WholeState() const;

  JetStream* js_;
  std::shared_ptr<server::Collection> collection_;
  ShardReplicaOptions options_;
  LogRepairTarget target_;
  std::unique_ptr<RetainedLog> retained_;  // the replica thread's
  uint64_t log_version_ = 0;               // the replica thread's
  uint64_t digest_ = 0;                    // the replica thread's (status_.digest)
  // The replica thread's: not yet caught up since it started or rewound
  // (the floor is then read before every batch).
  bool catching_up_ = true;
  // The replica thread's: entries reported in the last resend_for, each
  // with when it was first reported, and when they were last repeated.
  static constexpr size_t kResendEntries = 512;
  std::deque<std::pair<absl::Time, AppliedEntry>> recent_;
  absl::Time resent_ = absl::InfinitePast();
  mutable absl::Mutex mu_;
  ReplicaStatus status_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // When SetError last logged (InfinitePast: never, or a SetError(ok) since).
  absl::Time error_logged_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::thread thread_;
};

}  // namespace zoom::cluster

#endif  // ZOOM_SERVER_CLUSTER_SHARD_REPLICA_H_
