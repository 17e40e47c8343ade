#include "server/cluster/retained_log.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace zoom::cluster {
namespace {
constexpr uint8_t kRecordVersion = 2;
void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
uint64_t GetU64(std::string_view b) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(b[i]);
  return v;
}
}  // namespace

namespace {
constexpr uint8_t kPoints = 1;
constexpr uint8_t kEntry = 2;
}  // namespace

std::string EncodeRetainedRecord(std::string_view id, const LogEntry& entry,
                                 std::string_view data, uint64_t version, uint64_t log_version) {
  const std::string_view short_id = id.substr(0, 255);
  std::string out;
  out.push_back(static_cast<char>(kRecordVersion));
  out.push_back(static_cast<char>(short_id.size()));
  out.append(short_id);
  PutU64(&out, version);
  PutU64(&out, log_version);
  std::vector<uint64_t> points;
  if (entry.op == LogOp::kUpsert) {
    for (const LogPoint& p : entry.points) points.push_back(p.id);
  } else if (entry.op == LogOp::kDelete || entry.op == LogOp::kSetPayload ||
             entry.op == LogOp::kDeletePayload) {
    points = entry.ids;
  } else {
    out.push_back(static_cast<char>(kEntry));
    out.append(data);
    return out;
  }
  out.push_back(static_cast<char>(kPoints));
  const uint32_t n = static_cast<uint32_t>(points.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(n >> (8 * i)));
  for (uint64_t p : points) {
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(p >> (8 * i)));
  }
  return out;
}

absl::StatusOr<RetainedEntry> DecodeRetainedRecord(uint64_t sequence, std::string_view record) {
  const uint8_t format = record.empty() ? 0 : static_cast<uint8_t>(record[0]);
  if (record.size() < 3 || (format != 1 && format != kRecordVersion)) {
    return absl::DataLossError(absl::StrCat("retained log entry ", sequence, ": ",
                                            record.size() < 3 ? "too short" : "unknown version"));
  }
  const size_t id_len = static_cast<uint8_t>(record[1]);
  const size_t versions = format == 1 ? 0 : 16;
  if (record.size() < 3 + id_len + versions) {
    return absl::DataLossError(absl::StrCat("retained log entry ", sequence, ": ",
                                            record.size(), " bytes, shorter than its id"));
  }
  RetainedEntry e;
  e.sequence = sequence;
  e.id = std::string(record.substr(2, id_len));
  if (versions > 0) {
    e.version = GetU64(record.substr(2 + id_len, 8));
    e.log_version = GetU64(record.substr(10 + id_len, 8));
  }
  const uint8_t kind = static_cast<uint8_t>(record[2 + id_len + versions]);
  const std::string_view rest = record.substr(3 + id_len + versions);
  if (kind == kEntry) {
    e.data = std::string(rest);
    return e;
  }
  if (kind != kPoints || rest.size() < 4) {
    return absl::DataLossError(absl::StrCat("retained log entry ", sequence, ": kind ", kind));
  }
  uint32_t n = 0;
  for (int i = 3; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(rest[i]);
  if ((rest.size() - 4) % 8 != 0 || (rest.size() - 4) / 8 != n) {
    return absl::DataLossError(absl::StrCat("retained log entry ", sequence, ": ", n,
                                            " points in ", rest.size() - 4, " bytes"));
  }
  e.points.resize(n);
  for (uint32_t j = 0; j < n; ++j) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(rest[4 + 8 * j + i]);
    e.points[j] = v;
  }
  return e;
}

absl::StatusOr<std::unique_ptr<RetainedLog>> RetainedLog::Open(storage::MetadataStore* store,
                                                               uint32_t cid, uint64_t position,
                                                               uint64_t max_bytes,
                                                               uint64_t memory_bytes) {
  if (store == nullptr) return absl::InvalidArgumentError("a retained log needs a store");
  std::unique_ptr<RetainedLog> log(new RetainedLog(store, cid, max_bytes, memory_bytes));
  uint64_t past = 0;
  bool has_cover = false;
  ZOOM_RETURN_IF_ERROR(store->ScanLogRecords(
      cid, 0, [&](uint64_t seq, std::string_view record) -> absl::Status {
        if (seq == 0) {
          if (record.size() != 8) {
            return absl::DataLossError("retained log: its covered-from record is not 8 bytes");
          }
          for (int i = 7; i >= 0; --i) {
            log->covered_from_ = (log->covered_from_ << 8) | static_cast<uint8_t>(record[i]);
          }
          has_cover = true;
          return absl::OkStatus();
        }
        if (seq > position) {
          past = past == 0 ? seq : past;
          return absl::OkStatus();
        }
        ZOOM_ASSIGN_OR_RETURN(RetainedEntry e, DecodeRetainedRecord(seq, record));
        log->bytes_ += record.size();
        log->index_[seq] = Slot{std::move(e.id), record.size(), e.log_version};
        return absl::OkStatus();
      }));
  if (past != 0) ZOOM_RETURN_IF_ERROR(store->DeleteLogRecords(cid, past, UINT64_MAX));
  if (!has_cover || (log->index_.empty() && log->covered_from_ < position)) {
    // Nothing retained before this position (a fresh replica, a restored
    // snapshot): covered from here.
    ZOOM_RETURN_IF_ERROR(log->PutCoveredFrom(log->index_.empty() ? position
                                                                 : log->index_.begin()->first - 1));
  }
  return log;
}

absl::Status RetainedLog::PutCoveredFrom(uint64_t sequence) {
  std::string v;
  for (int i = 0; i < 8; ++i) v.push_back(static_cast<char>(sequence >> (8 * i)));
  ZOOM_RETURN_IF_ERROR(store_->PutLogRecord(cid_, 0, v));
  covered_from_ = sequence;
  return absl::OkStatus();
}

absl::Status RetainedLog::Append(uint64_t sequence, std::string_view id, const LogEntry& entry,
                                 std::string_view data, uint64_t version,
                                 uint64_t log_version) {
  const std::string record = EncodeRetainedRecord(id, entry, data, version, log_version);
  // The bytes in memory: the newest stay.
  if (auto it = recent_.find(sequence); it != recent_.end()) {
    recent_bytes_ -= it->second.size();
    recent_.erase(it);
  }
  if (data.size() <= memory_bytes_) {
    recent_bytes_ += data.size();
    recent_.emplace(sequence, std::string(data));
    while (recent_bytes_ > memory_bytes_) {
      recent_bytes_ -= recent_.begin()->second.size();
      recent_.erase(recent_.begin());
    }
  }
  ZOOM_RETURN_IF_ERROR(store_->PutLogRecord(cid_, sequence, record));
  auto [it, fresh] = index_.try_emplace(sequence);
  if (!fresh) bytes_ -= it->second.bytes;
  it->second = Slot{std::string(id.substr(0, 255)), record.size(), log_version};
  bytes_ += record.size();
  // The oldest go first, down to 7/8 of the budget (one range deletion
  // per eighth of it, not one per entry); the newest stays whatever its
  // size.
  uint64_t drop_to = 0;
  const uint64_t keep = bytes_ > max_bytes_ ? max_bytes_ - max_bytes_ / 8 : bytes_;
  for (auto o = index_.begin(); bytes_ > keep && std::next(o) != index_.end();) {
    bytes_ -= o->second.bytes;
    drop_to = o->first + 1;
    o = index_.erase(o);
  }
  if (drop_to > 0) {
    ZOOM_RETURN_IF_ERROR(PutCoveredFrom(drop_to - 1));
    ZOOM_RETURN_IF_ERROR(store_->DeleteLogRecords(cid_, 1, drop_to));
  }
  return absl::OkStatus();
}

std::optional<std::string> RetainedLog::IdAt(uint64_t sequence) const {
  auto it = index_.find(sequence);
  if (it == index_.end()) return std::nullopt;
  return it->second.id;
}

std::optional<uint64_t> RetainedLog::LogVersionAt(uint64_t sequence) const {
  auto it = index_.find(sequence);
  if (it == index_.end() || it->second.log_version == 0) return std::nullopt;
  return it->second.log_version;
}

std::vector<uint64_t> RetainedLog::Sequences() const {
  std::vector<uint64_t> out;
  out.reserve(index_.size());
  for (const auto& [seq, slot] : index_) out.push_back(seq);
  return out;
}

absl::StatusOr<std::vector<RetainedEntry>> RetainedLog::After(uint64_t sequence) const {
  std::vector<RetainedEntry> out;
  if (sequence == UINT64_MAX) return out;
  ZOOM_RETURN_IF_ERROR(store_->ScanLogRecords(
      cid_, std::max<uint64_t>(sequence + 1, 1), [&](uint64_t seq, std::string_view record) -> absl::Status {
        if (!index_.contains(seq)) return absl::OkStatus();
        ZOOM_ASSIGN_OR_RETURN(RetainedEntry e, DecodeRetainedRecord(seq, record));
        if (auto r = recent_.find(seq); r != recent_.end()) e.data = r->second;
        out.push_back(std::move(e));
        return absl::OkStatus();
      }));
  return out;
}

absl::Status RetainedLog::DropAfter(uint64_t sequence) {
  if (sequence == UINT64_MAX) return absl::OkStatus();
  ZOOM_RETURN_IF_ERROR(store_->DeleteLogRecords(cid_, std::max<uint64_t>(sequence + 1, 1),
                                                UINT64_MAX));
  if (sequence < covered_from_) ZOOM_RETURN_IF_ERROR(PutCoveredFrom(sequence));
  for (auto it = index_.upper_bound(sequence); it != index_.end();) {
    bytes_ -= it->second.bytes;
    it = index_.erase(it);
  }
  for (auto it = recent_.upper_bound(sequence); it != recent_.end();) {
    recent_bytes_ -= it->second.size();
    it = recent_.erase(it);
  }
  return absl::OkStatus();
}

}  // namespace zoom::cluster
