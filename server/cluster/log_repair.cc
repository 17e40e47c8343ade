#include "server/cluster/log_repair.h"

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/cluster/log_entry.h"

namespace zoom::cluster {
namespace {

std::string CopyId(std::string_view id) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return absl::StrCat(std::string(OriginalId(id)), "~", absl::Hex(rng(), absl::kZeroPad16));
}

absl::StatusOr<uint64_t> FloorOf(const LogRepairTarget& target) {
  if (!target.log_floor) return 0;
  return target.log_floor();
}

// Whether the log still holds the entry `id` at `sequence` of the subject
// (purged below the floor counts as held, but only below the log's end
// `last`: an entry past the end was lost with the log's tail, whatever the
// floor says, and the sequences past the end go to new writes).
absl::StatusOr<bool> Held(const JetStream& js, const LogRepairTarget& target,
                          std::string_view id, uint64_t sequence, uint64_t floor,
                          uint64_t last) {
  absl::StatusOr<LogMessage> m = js.GetMessage(target.stream, sequence);
  if (absl::IsNotFound(m.status())) return sequence < floor && sequence <= last;
  if (!m.ok()) return m.status();
  return m->subject == target.subject && m->id == id;
}

// The log's entries on the subject after `after`, and its last sequence.
absl::Status ReadAfter(JetStream* js, const LogRepairTarget& target, uint64_t after,
                       std::vector<LogMessage>* out, uint64_t* last) {
  out->clear();
  ZOOM_ASSIGN_OR_RETURN(*last, js->LastSequence(target.stream, target.subject));
  if (*last <= after) return absl::OkStatus();
  ZOOM_ASSIGN_OR_RETURN(std::unique_ptr<PullConsumer> c,
                        js->Consume(target.stream, target.subject, target.scratch_durable,
                                    after + 1));
  absl::Status st;
  uint64_t next_delivery = 1;  // a gap in the deliveries: read again
  for (int empty = 0; empty < 3;) {
    absl::StatusOr<std::vector<LogMessage>> batch = c->Fetch(512, absl::Milliseconds(200));
    if (!batch.ok()) {
      st = batch.status();
      break;
    }
    if (batch->empty()) {
      ++empty;
      continue;
    }
    for (LogMessage& m : *batch) {
      if (m.delivery != next_delivery) {
        st = absl::UnavailableError(absl::StrCat(
            "log repair of ", target.subject, ": delivery ", next_delivery,
            " of the scratch consumer never came (a connection lost?); read again"));
        break;
      }
      ++next_delivery;
      if (m.sequence > after) out->push_back(std::move(m));
    }
    if (!st.ok()) break;
    if (!out->empty() && out->back().sequence >= *last && out->back().pending == 0) break;
  }
  c.reset();
  (void)js->DeleteConsumer(target.stream, target.scratch_durable);
  ZOOM_RETURN_IF_ERROR(st);
  if (out->empty() || out->back().sequence < *last) {
    return absl::UnavailableError(absl::StrCat(
        "log repair of ", target.subject, ": reading the log after ", after, " stopped at ",
        out->empty() ? after : out->back().sequence, " before its end ", *last));
  }
  *last = out->back().sequence;
  return absl::OkStatus();
}

// The fork is older than what the replica retains: its whole state, each
// point at its write version, then a rewind to before the floor (or the
// log's end) to apply whatever the log holds.
// The copies of this replica's entries in `mine` whose original is not in
// `present`, each at the write version it was applied at (an entry whose
// bytes are gone: its points' state, target.state_of), as (id, bytes)
// pairs one after the other.
absl::StatusOr<std::vector<std::string>> CopiesOf(
    const LogRepairTarget& target, const std::vector<RetainedEntry>& mine,
    const std::set<std::string, std::less<>>& present) {
  std::vector<std::string> out;
  for (const RetainedEntry& e : mine) {
    if (present.contains(OriginalId(e.id))) continue;
    if (e.data.has_value()) {
      ZOOM_ASSIGN_OR_RETURN(LogEntry decoded, DecodeLogEntry(*e.data));
      if (decoded.version == 0) decoded.version = e.version;
      out.push_back(CopyId(e.id));
      out.push_back(EncodeLogEntry(decoded));
      continue;
    }
    if (!target.state_of) {
      return absl::FailedPreconditionError(absl::StrCat(
          "log repair of ", target.subject, ": entry ", e.sequence,
          " is no longer kept and nothing reads its points' state"));
    }
    ZOOM_ASSIGN_OR_RETURN(std::vector<std::string> state, target.state_of(e.points));
    for (std::string& bytes : state) {
      out.push_back(CopyId(e.id));
      out.push_back(std::move(bytes));
    }
  }
  return out;
}

absl::StatusOr<LogRepairResult> PublishWholeState(JetStream* js, const LogRepairTarget& target,
                                                  uint64_t floor, uint64_t end) {
  ZOOM_ASSIGN_OR_RETURN(std::vector<std::string> state, target.whole_state());
  const std::string id = CopyId(absl::StrCat("state-", absl::Hex(std::random_device{}())));
  for (const std::string& bytes : state) {
    ZOOM_RETURN_IF_ERROR(js->Publish(target.subject, bytes, CopyId(id)).status());
  }
  LogRepairResult result;
  result.fork_point = std::min(end, floor > 0 ? floor - 1 : 0);
  result.republished = state.size();
  result.whole_state = true;
  return result;
}

}  // namespace

std::string_view OriginalId(std::string_view id) { return id.substr(0, id.find('~')); }

absl::StatusOr<LogVerdict> CheckLog(const JetStream& js, const LogRepairTarget& target,
                                    const RetainedLog& retained, uint64_t position) {
  return CheckLogAt(js, target, position, position == 0 ? std::nullopt : retained.IdAt(position));
}

absl::StatusOr<LogVerdict> CheckLogAt(const JetStream& js, const LogRepairTarget& target,
                                      uint64_t position, const std::optional<std::string>& id) {
  LogVerdict v;
  if (position == 0) return v;
  if (!id.has_value()) {
    // A restored snapshot's position: the log must still reach it (after a
    // power failure it may end before it, and give the sequences between to
    // new writes, which the replica would never read).
    ZOOM_ASSIGN_OR_RETURN(uint64_t last, js.LastSequence(target.stream, target.subject));
    if (last < position) {
      v.check = LogCheck::kForked;
      v.detail = absl::StrCat("the log of ", target.subject, " ends at ", last,
                              ", before the position ", position, " of the restored snapshot");
      return v;
    }
    v.check = LogCheck::kUnverifiable;
    return v;
  }
  // Cheaply first (any server of the stream, raw bytes): what it says
  // agrees with the replica in the common case; anything else is asked
  // again of the stream's leader (a follower may lag).
  absl::StatusOr<LogMessage> m = js.GetMessage(target.stream, position, /*direct=*/true);
  if (m.ok() && m->subject == target.subject && m->id == *id) return v;
  m = js.GetMessage(target.stream, position);
  if (m.ok()) {
    if (m->subject == target.subject && m->id == *id) return v;
    v.check = LogCheck::kForked;
    v.detail = absl::StrCat("the log's entry ", position, " is '", m->id, "' on ", m->subject,
                            ", not '", *id, "' as applied");
    return v;
  }
  if (!absl::IsNotFound(m.status())) return m.status();
  ZOOM_ASSIGN_OR_RETURN(uint64_t floor, FloorOf(target));
  ZOOM_ASSIGN_OR_RETURN(uint64_t last, js.LastSequence(target.stream, target.subject));
  // Purged below every replica, unless the log now ends before it (the
  // floor was raised over a history the log lost).
  if (position < floor && position <= last) return v;
  v.check = LogCheck::kForked;
  v.detail = last < position
                 ? absl::StrCat("the log of ", target.subject, " ends at ", last,
                                ", before the applied position ", position)
                 : absl::StrCat("the log holds no entry at the applied position ", position);
  return v;
}

absl::StatusOr<LogRepairResult> RepairLog(JetStream* js, const LogRepairTarget& target,
                                          const RetainedLog& retained, uint64_t position) {
  ZOOM_ASSIGN_OR_RETURN(const uint64_t floor, FloorOf(target));
  ZOOM_ASSIGN_OR_RETURN(const uint64_t end, js->LastSequence(target.stream, target.subject));
  // 1. The fork point: entries held are a prefix of the retained ones.
  std::vector<uint64_t> seqs = retained.Sequences();
  while (!seqs.empty() && seqs.back() > position) seqs.pop_back();
  size_t lo = 0, hi = seqs.size();  // seqs[0, lo) held; [hi, end) not
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    ZOOM_ASSIGN_OR_RETURN(bool held,
                          Held(*js, target, *retained.IdAt(seqs[mid]), seqs[mid], floor, end));
    if (held) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  LogRepairResult result;
  if (lo > 0) {
    result.fork_point = seqs[lo - 1];
  } else {
    // Not even the oldest retained entry is held: the fork is at or before
    // what the replica retains from. Repairable only from the beginning or
    // from below the floor (purged: held by every replica).
    const uint64_t cover = retained.covered_from();
    if (cover > 0 && cover >= floor) {
      if (!target.whole_state) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the log of ", target.subject, " forked at or before sequence ", cover,
            ", from which this replica retains its entries: restore a peer's snapshot"));
      }
      return PublishWholeState(js, target, floor, end);
    }
    // Never past the log's end: what lies between it and `cover` was purged
    // below every replica (it is in each one's state) and the log lost it
    // with its tail; the sequences after the end go to new writes, which a
    // replica positioned past them would skip.
    result.fork_point = std::min(cover, end);
  }
  ZOOM_ASSIGN_OR_RETURN(std::vector<RetainedEntry> mine, retained.After(result.fork_point));
  std::set<std::string, std::less<>> mine_ids;
  for (const RetainedEntry& e : mine) mine_ids.insert(std::string(OriginalId(e.id)));

  for (int attempt = 0; attempt < target.max_attempts; ++attempt) {
    // 2. What the log holds after the fork point.
    std::vector<LogMessage> log;
    uint64_t last = 0;
    ZOOM_RETURN_IF_ERROR(ReadAfter(js, target, result.fork_point, &log, &last));
    std::set<std::string, std::less<>> present;
    for (const LogMessage& m : log) present.insert(std::string(OriginalId(m.id)));
    // 3. Lost: applied here, in the log no more. Or an earlier repair that
    // stopped between its copies: a write of the log after f none of whose
    // occurrences follows the last copy of an entry of this replica.
    uint64_t lost = 0;
    bool ordered = false;  // a lost entry whose order matters
    for (const RetainedEntry& e : mine) {
      if (present.contains(OriginalId(e.id))) continue;
      ++lost;
      if (!e.data.has_value()) continue;
      // Field index changes are not versioned (applied as they come):
      // their order is kept too.
      absl::StatusOr<LogEntry> decoded = DecodeLogEntry(*e.data);
      if (e.version == 0 || !decoded.ok() || decoded->op == LogOp::kCreateFieldIndex ||
          decoded->op == LogOp::kDeleteFieldIndex) {
        ordered = true;
      }
    }
    if (!ordered) {
      // 4'. Every lost entry at its write version: what a replica holds no
      // longer depends on the order it applies them in (versioned_apply.h),
      // so only they are published, and writes may come between.
      if (lost == 0) return result;
      ZOOM_ASSIGN_OR_RETURN(std::vector<std::string> copies, CopiesOf(target, mine, present));
      for (size_t i = 0; i < copies.size(); i += 2) {
        ZOOM_RETURN_IF_ERROR(js->Publish(target.subject, copies[i + 1], copies[i]).status());
      }
      result.republished = copies.size() / 2;
      return result;
    }
    bool unfinished = false;
    if (lost == 0) {
      size_t last_copy = log.size();
      std::map<std::string, size_t, std::less<>> last_seen;  // writes not of this replica
      for (size_t i = 0; i < log.size(); ++i) {
        const std::string_view orig = OriginalId(log[i].id);
        if (mine_ids.contains(orig)) {
          if (orig.size() != log[i].id.size()) last_copy = i;
        } else {
          last_seen[std::string(orig)] = i;
        }
      }
      for (const auto& [orig, i] : last_seen) {
        if (last_copy < log.size() && i < last_copy) unfinished = true;
      }
    }
    if (lost == 0 && !unfinished) return result;
    // 4'. Every entry of this replica after f, then the writes that came
    // after, so that they stay after them: (id, bytes) pairs.
    ZOOM_ASSIGN_OR_RETURN(std::vector<std::string> copies, CopiesOf(target, mine, {}));
    const uint64_t republished = copies.size() / 2;
    std::set<std::string, std::less<>> copied;
    for (const LogMessage& m : log) {
      const std::string_view orig = OriginalId(m.id);
      if (mine_ids.contains(orig) || copied.contains(orig)) continue;
      copied.insert(std::string(orig));
      copies.push_back(CopyId(m.id));
      copies.push_back(m.data);
    }
    uint64_t expected = last;
    bool interrupted = false;
    for (size_t i = 0; i < copies.size(); i += 2) {
      absl::StatusOr<PubAck> ack =
          js->PublishAfter(target.subject, copies[i + 1], copies[i], expected);
      if (absl::IsAborted(ack.status())) {
        interrupted = true;  // a write came between: read the log again
        break;
      }
      if (!ack.ok()) return ack.status();
      expected = ack->sequence;
    }
    if (interrupted) continue;
    result.republished = republished;
    result.copied = copies.size() / 2 - republished;
    return result;
  }
  return absl::AbortedError(absl::StrCat("log repair of ", target.subject, ": writes came "
                                         "between its copies ", target.max_attempts,
                                         " times; tried again later"));
}

}  // namespace zoom::cluster
