#include "server/cluster/shard_replica.h"

#include <algorithm>
#include <future>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/cluster/log_entry.h"
#include "server/cluster/versioned_apply.h"

namespace zoom::cluster {
namespace {

// Every replica meets these at the same entry: pass it, as they all do.
bool Deterministic(const absl::Status& st) {
  switch (st.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return true;
    default:
      return false;
  }
}

}  // namespace

ShardReplica::ShardReplica(JetStream* js, std::shared_ptr<server::Collection> collection,
                           ShardReplicaOptions options)
    : js_(js), collection_(std::move(collection)), options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<ShardReplica>> ShardReplica::Start(
    JetStream* js, std::shared_ptr<server::Collection> collection, ShardReplicaOptions options) {
  if (js == nullptr || collection == nullptr) {
    return absl::InvalidArgumentError("a shard replica needs JetStream and a collection");
  }
  if (!JetStream::ValidName(options.stream) || !JetStream::ValidSubject(options.subject) ||
      !JetStream::ValidName(options.durable)) {
    return absl::InvalidArgumentError(absl::StrCat("bad stream/subject/consumer: '",
                                                   options.stream, "' '", options.subject, "' '",
                                                   options.durable, "'"));
  }
  std::unique_ptr<ShardReplica> r(new ShardReplica(js, std::move(collection), std::move(options)));
  r->target_.stream = r->options_.stream;
  r->target_.subject = r->options_.subject;
  r->target_.scratch_durable = absl::StrCat(r->options_.durable, "-repair");
  r->target_.log_floor = r->options_.log_floor;
  r->target_.state_of = [p = r.get()](const std::vector<uint64_t>& points) {
    return p->StateOf(points);
  };
  r->target_.whole_state = [p = r.get()] { return p->WholeState(); };
  ZOOM_ASSIGN_OR_RETURN(r->retained_,
                        RetainedLog::Open(r->collection_->metadata_store(),
                                          r->collection_->metadata_id(),
                                          r->collection_->log_position(),
                                          r->options_.retain_bytes,
                                          r->options_.retain_memory_bytes));
  {
    absl::MutexLock l(&r->mu_);
    r->status_.applied = r->collection_->log_position();
  }
  r->log_version_ = r->collection_->log_version();
  ZOOM_ASSIGN_OR_RETURN(r->digest_, StateDigest(*r->collection_));
  {
    absl::MutexLock l(&r->mu_);
    r->status_.digest = r->digest_;
  }
  r->thread_ = std::thread([p = r.get()] { p->Run(); });
  return r;
}

ShardReplica::~ShardReplica() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

ReplicaStatus ShardReplica::status() const {
  absl::MutexLock l(&mu_);
  return status_;
}

bool ShardReplica::WaitApplied(uint64_t sequence, absl::Time deadline) const {
  absl::MutexLock l(&mu_);
  auto done = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return status_.applied >= sequence || status_.failed || stopping_;
  };
  mu_.AwaitWithDeadline(absl::Condition(&done), deadline);
  return status_.applied >= sequence;
}

bool ShardReplica::Pause(absl::Duration d) {
  absl::MutexLock l(&mu_);
  auto stop = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_; };
  mu_.AwaitWithTimeout(absl::Condition(&stop), d);
  return !stopping_;
}

void ShardReplica::SetError(const absl::Status& st) {
  // A replica that keeps failing says so in the log: its first error, then
  // at most one line every 30 s (the fault runner once found a replica
  // silent for minutes, not catching up).
  constexpr absl::Duration kEvery = absl::Seconds(30);
  std::string text = st.ok() ? "" : st.ToString();
  bool say = false;
  {
    absl::MutexLock l(&mu_);
    status_.last_error = text;
    const absl::Time now = absl::Now();
    if (st.ok()) {
      error_logged_ = absl::InfinitePast();
    } else if (now - error_logged_ >= kEvery) {
      error_logged_ = now;
      say = true;
    }
  }
  if (say) {
    ZOOM_LOG(WARNING, "collection ", collection_->config().name, ": replica of ",
             options_.subject, " at position ", collection_->log_position(), ": ", text);
  }
}

namespace {

// Entries whose answer counts points (DeleteResponse.deleted,
// SetPayloadResponse.updated): a write concern's acknowledgement carries it.
bool CountsPoints(LogOp op) {
  return op == LogOp::kDelete || op == LogOp::kSetPayload || op == LogOp::kDeletePayload;
}

}  // namespace

bool ShardReplica::Report(std::vector<AppliedEntry>* applied) {
  if (options_.sync) {
    if (absl::Status st = options_.sync(); !st.ok()) {
      SetError(absl::Status(st.code(), absl::StrCat("making applied writes durable: ",
                                                    st.message())));
      return false;
    }
  }
  uint64_t durable = 0;
  {
    absl::MutexLock l(&mu_);
    durable = status_.durable = status_.applied;
  }
  // What is repeated: not entries past a rewound position (a repair gave
  // their sequences to other entries), nor those older than resend_for.
  const absl::Time now = absl::Now();
  std::erase_if(recent_, [&](const auto& r) {
    return r.second.sequence > durable || now - r.first > options_.resend_for;
  });
  if (options_.on_durable) {
    if (!recent_.empty() && now - resent_ >= options_.report_every) {
      resent_ = now;
      std::vector<AppliedEntry> with_repeats;
      with_repeats.reserve(recent_.size() + applied->size());
      for (const auto& r : recent_) with_repeats.push_back(r.second);
      with_repeats.insert(with_repeats.end(), applied->begin(), applied->end());
      options_.on_durable(durable, with_repeats);
    } else {
      options_.on_durable(durable, *applied);
    }
  }
  for (AppliedEntry& e : *applied) recent_.emplace_back(now, std::move(e));
  while (recent_.size() > kResendEntries) recent_.pop_front();
  applied->clear();
  return true;
}

absl::StatusOr<std::vector<std::string>> ShardReplica::StateOf(
    const std::vector<uint64_t>& points) const {
  return StateEntries(*collection_, points);
}

absl::StatusOr<std::vector<std::string>> ShardReplica::WholeState() const {
  return WholeStateEntries(*collection_);
}

bool ShardReplica::CheckAndRepair(std::unique_ptr<PullConsumer>* consumer) {
  const uint64_t position = collection_->log_position();
  return OnVerdict(CheckLog(*js_, target_, *retained_, position), position, consumer);
}

bool ShardReplica::OnVerdict(const absl::StatusOr<LogVerdict>& verdict, uint64_t position,
                             std::unique_ptr<PullConsumer>* consumer) {
  const std::string& name = collection_->config().name;
  if (!verdict.ok()) {
    if (absl::IsNotFound(verdict.status()) && options_.ensure_stream) {
      // The stream itself is gone (NATS lost it): made again, empty; the
      // next check finds the log ending before the position and repairs.
      if (absl::Status st = options_.ensure_stream(); !st.ok()) {
        ZOOM_LOG(WARNING, "collection ", name, ": creating its stream again: ", st.message());
      }
    }
    SetError(verdict.status());
    consumer->reset();
    (void)Pause(options_.retry_wait);
    return false;
  }
  if (verdict->check != LogCheck::kForked) return true;
  recent_.clear();  // their sequences may soon hold other entries
  ZOOM_LOG(WARNING, "collection ", name, ": the log forked under this replica: ",
           verdict->detail, "; repairing");
  {
    absl::MutexLock l(&mu_);
    ++status_.forks;
    status_.last_fork = verdict->detail;
  }
  if (options_.on_fork) options_.on_fork(nullptr, verdict->detail);
  consumer->reset();
  std::function<void()> release;
  if (options_.repair_lock) {
    absl::StatusOr<std::function<void()>> lock = options_.repair_lock();
    if (!lock.ok()) {
      SetError(lock.status());
      (void)Pause(options_.retry_wait);
      return false;
    }
    release = std::move(*lock);
  }
  absl::StatusOr<LogRepairResult> repaired = RepairLog(js_, target_, *retained_, position);
  absl::Status st = repaired.status();
  if (st.ok() && options_.lower_floor) {
    // The log after the fork point is whole again: a floor the lost history
    // raised past it would stop this replica, and every other, as purged
    // past (found by fault_runner.py's power_nats). Lowered before the
    // rewind, so that no replica at the fork point ever reads the old one.
    st = options_.lower_floor(repaired->fork_point + 1);
  }
  uint64_t log_version = log_version_;
  if (st.ok()) {
    // Rewound: the log from the fork point is applied again, with the log
    // version after it (every replica's there), when known.
    if (repaired->fork_point == 0) {
      log_version = 0;
    } else if (std::optional<uint64_t> v = retained_->LogVersionAt(repaired->fork_point)) {
      log_version = *v;
    }
    st = retained_->DropAfter(repaired->fork_point);
    if (st.ok()) st = collection_->SetLogPosition(repaired->fork_point, log_version);
    if (st.ok()) {
      log_version_ = log_version;
      catching_up_ = true;
    }
  }
  if (release) release();
  if (absl::IsFailedPrecondition(st)) {
    ZOOM_LOG(ERROR, "collection ", name, ": ", st.message());
    absl::MutexLock l(&mu_);
    status_.failed = true;
    status_.needs_restore = true;
    status_.last_error = st.ToString();
    return false;
  }
  if (!st.ok()) {
    SetError(st);
    (void)Pause(options_.retry_wait);
    return false;
  }
  const std::string done = absl::StrCat(
      verdict->detail, "; repaired: rewound to ", repaired->fork_point, ", ",
      repaired->republished,
      repaired->whole_state ? " entries of its whole state published (the fork is older than "
                              "what it retains)"
                            : " entries published again",
      " and ", repaired->copied, " later ones copied after them");
  ZOOM_LOG(WARNING, "collection ", name, ": ", done);
  {
    absl::MutexLock l(&mu_);
    status_.applied = repaired->fork_point;
    status_.durable = std::min(status_.durable, repaired->fork_point);
    ++status_.repairs;
    status_.republished += repaired->republished;
    status_.last_fork = done;
    status_.last_error.clear();
  }
  if (options_.on_fork) options_.on_fork(&*repaired, done);
  return false;
}

void ShardReplica::Run() {
  const std::string& name = collection_->config().name;
  std::unique_ptr<PullConsumer> consumer;
  absl::Time floor_checked = absl::InfinitePast();
  absl::Time reported = absl::InfinitePast();
  absl::Time stall_checked = absl::Now();
  uint64_t stalled_at = UINT64_MAX;  // the position at the last check that found the log ahead
  absl::Time verified = absl::Now();
  bool unverified = false;  // applied entries whose batch's check failed
  std::vector<AppliedEntry> applied;  // not yet reported
  // The consumer's next delivery number (LogMessage::delivery): a number
  // skipped is a delivery lost on the way (a connection cut mid-fetch); the
  // entries after it are not applied, the consumer is made again from the
  // position. Without this a partition could make the replica apply later
  // entries first and skip the lost ones as redelivered when they came back
  // (found by tests/cluster/fault_runner.py).
  uint64_t next_delivery = 1;
  for (;;) {
    {
      absl::MutexLock l(&mu_);
      if (stopping_ || status_.failed) return;
    }
    if (consumer == nullptr) {
      auto made = js_->Consume(options_.stream, options_.subject, options_.durable,
                               collection_->log_position() + 1);
      if (!made.ok()) {
        SetError(made.status());
        if (absl::IsNotFound(made.status()) && options_.ensure_stream) {
          // The stream itself is gone (NATS lost it with its metadata):
          // made again, empty, so that the log check finds it ending before
          // the position and repairs (a replica that only retried the
          // consumer waited for minutes, found by fault_runner.py).
          if (absl::Status st = options_.ensure_stream(); !st.ok()) {
            ZOOM_LOG(WARNING, "collection ", name, ": creating its stream again: ",
                     st.message());
          } else {
            ZOOM_LOG(WARNING, "collection ", name, ": its stream ", options_.stream,
                     " was gone: made again");
          }
          (void)CheckAndRepair(&consumer);
        }
        if (!Pause(options_.retry_wait)) return;
        continue;
      }
      consumer = std::move(*made);
      next_delivery = 1;
    }
    auto batch = consumer->Fetch(options_.fetch_batch, options_.fetch_wait);
    if (!batch.ok()) {
      // A lost connection or a consumer lost with its server: start it again
      // from the position.
      SetError(batch.status());
      consumer.reset();
      if (!Pause(options_.retry_wait)) return;
      continue;
    }
    if (batch->empty()) {
      catching_up_ = false;
      {
        absl::MutexLock l(&mu_);
        status_.pending = 0;
        status_.caught_up = true;
        status_.last_error.clear();
      }
      if (unverified || absl::Now() - verified >= options_.verify_every) {
        verified = absl::Now();
        if (!CheckAndRepair(&consumer)) continue;
        unverified = false;
      }
      if (absl::Now() - reported >= options_.report_every && Report(&applied)) {
        reported = absl::Now();
      }
      // A consumer that delivers nothing while the log holds entries after
      // the position (its server lost it, or its Raft group has no leader
      // after NATS servers restarted: a fetch then just times out) is made
      // again from the position.
      if (absl::Now() - stall_checked >= options_.floor_check) {
        stall_checked = absl::Now();
        absl::StatusOr<uint64_t> last = js_->LastSequence(options_.stream, options_.subject);
        const uint64_t position = collection_->log_position();
        if (!last.ok() || *last <= position) {
          stalled_at = UINT64_MAX;
        } else if (stalled_at != position) {
          stalled_at = position;  // ahead once: a write may have just come
        } else {
          SetError(absl::UnavailableError(absl::StrCat(
              "the consumer delivered nothing while the log is at ", *last, ", past position ",
              position, ": made again")));
          consumer.reset();
          stalled_at = UINT64_MAX;
        }
      }
      continue;
    }
    stall_checked = absl::Now();
    stalled_at = UINT64_MAX;
    // The floor before every batch while catching up (from the start, or
    // after a repair's rewind): the trim may purge under a replica whose
    // record still shows the position it had before it rewound, and the
    // consumer skips purged entries without a word (the fault runner found
    // a replica that applied past such a gap and lacked a write); once
    // caught up, every floor_check.
    if (options_.log_floor &&
        (catching_up_ || absl::Now() - floor_checked >= options_.floor_check)) {
      absl::StatusOr<uint64_t> floor = options_.log_floor();
      if (!floor.ok()) {
        // Not applied without knowing: fetched again after the pause.
        SetError(floor.status());
        consumer.reset();
        if (!Pause(options_.retry_wait)) return;
        continue;
      }
      const uint64_t position = collection_->log_position();
      if (position + 1 < *floor) {
        ZOOM_LOG(ERROR, "collection ", name, ": its log position ", position, " is below the "
                 "floor of ", options_.subject, " (", *floor, ": purged below it); replica "
                 "stopped, to be restored from a peer's snapshot");
        absl::MutexLock l(&mu_);
        status_.failed = true;
        status_.behind_floor = true;
        status_.last_error = absl::StrCat("log purged past position ", position, " (floor ",
                                          *floor, ")");
        return;
      }
      floor_checked = absl::Now();
    }
    // Is the log's entry at the position still the one applied? Asked
    // beside the apply (its answer awaited before anything is reported
    // durable): a batch applied across a fork is undone by the repair's
    // rewind, and every entry in it is in the log.
    std::future<absl::StatusOr<LogVerdict>> check;
    const uint64_t checked = collection_->log_position();
    if (batch->back().sequence > checked) {
      verified = absl::Now();
      check = std::async(std::launch::async,
                         [js = js_, target = &target_, checked,
                          id = checked == 0 ? std::nullopt : retained_->IdAt(checked)] {
                           return CheckLogAt(*js, *target, checked, id);
                         });
    }
    uint64_t acked_through = 0;
    bool retry = false;
    for (const LogMessage& m : *batch) {
      if (m.delivery != next_delivery) {
        SetError(absl::UnavailableError(absl::StrCat(
            "delivery ", next_delivery, " of the consumer never came (delivery ", m.delivery,
            " did, entry ", m.sequence, "): made again from position ",
            collection_->log_position())));
        ZOOM_LOG(WARNING, "collection ", name, ": delivery ", next_delivery, " of ",
                 options_.subject, " never came (delivery ", m.delivery, " did, entry ",
                 m.sequence, "): the consumer is made again from position ",
                 collection_->log_position());
        retry = true;
        break;
      }
      ++next_delivery;
      if (m.sequence <= collection_->log_position()) continue;  // redelivered
      absl::StatusOr<LogEntry> entry = DecodeLogEntry(m.data);
      if (!entry.ok()) {
        ZOOM_LOG(ERROR, "collection ", name, ": log entry ", m.sequence, " of ", options_.subject,
                 " cannot be applied, replica stopped: ", entry.status().message());
        absl::MutexLock l(&mu_);
        status_.failed = true;
        status_.last_error = absl::StrCat("entry ", m.sequence, ": ", entry.status().ToString());
        return;
      }
      // Its write version (versioned_apply.h) and the log version after it.
      const uint64_t version = entry->version != 0
                                   ? entry->version
                                   : std::max(log_version_ + 1, m.timestamp);
      const uint64_t log_version = std::max(log_version_, version);
      // Kept before it is applied (made durable by the apply's sync).
      if (absl::Status kept =
              retained_->Append(m.sequence, m.id, *entry, m.data, version, log_version);
          !kept.ok()) {
        SetError(kept);
        retry = true;
        break;
      }
      absl::StatusOr<uint64_t> result = ApplyVersioned(*entry, version, collection_.get(), &digest_);
      absl::Status st = result.status();
      bool skipped = false;
      if (!st.ok() && Deterministic(st)) {
        ZOOM_LOG(WARNING, "collection ", name, ": log entry ", m.sequence, " (",
                 LogOpName(entry->op), ") refused, as on every replica: ", st.message());
        skipped = true;
        st = absl::OkStatus();
      }
      if (st.ok()) st = collection_->SetLogPosition(m.sequence, log_version);
      if (st.ok()) log_version_ = log_version;
      if (!st.ok()) {
        // Retried from this entry (an applied one is applied again: every
        // entry is idempotent alone).
        SetError(absl::Status(st.code(), absl::StrCat("entry ", m.sequence, ": ", st.message())));
        retry = true;
        break;
      }
      acked_through = m.sequence;
      AppliedEntry done{m.sequence, m.id, std::nullopt};
      if (CountsPoints(entry->op)) done.changed = skipped ? 0 : *result;
      applied.push_back(std::move(done));
      absl::MutexLock l(&mu_);
      status_.applied = m.sequence;
      status_.digest = digest_;
      status_.pending = m.pending;
      status_.caught_up = m.pending == 0;
      ++status_.entries;
      if (skipped) ++status_.skipped;
      status_.last_error.clear();
    }
    if (check.valid()) {
      const absl::StatusOr<LogVerdict> verdict = check.get();
      const bool forked = verdict.ok() && verdict->check == LogCheck::kForked;
      if (!OnVerdict(verdict, checked, &consumer)) {
        // Forked (repaired and rewound: nothing of this batch is reported;
        // it is applied again from the log), or the check failed (reported
        // after a check that succeeds).
        if (forked) applied.clear();
        unverified = !forked;
        continue;
      }
      unverified = false;
    }
    if (acked_through > 0) {
      if (Report(&applied)) reported = absl::Now();
      // The acknowledgement only trims what JetStream redelivers; the
      // position is the truth. A failure here is harmless.
      (void)consumer->AckThrough(acked_through);
    }
    if (retry) {
      consumer.reset();
      if (!Pause(options_.retry_wait)) return;
    }
  }
}

}  // namespace zoom::cluster
