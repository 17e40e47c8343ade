#include "server/cluster/log_entry.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/crc32c.h"
#include "common/endian.h"
#include "common/status_macros.h"

namespace zoom::cluster {
namespace {

constexpr char kMagic[4] = {'Z', 'L', 'O', 'G'};
constexpr size_t kHeader = 8, kTrailer = 4;

void Put32(std::string* s, uint32_t v) { PutLittleEndian(s, v, 4); }
void Put64(std::string* s, uint64_t v) { PutLittleEndian(s, v, 8); }
void PutBytes(std::string* s, std::string_view b) {
  Put32(s, static_cast<uint32_t>(b.size()));
  s->append(b.data(), b.size());
}
void PutIds(std::string* s, const std::vector<uint64_t>& ids) {
  Put32(s, static_cast<uint32_t>(ids.size()));
  for (uint64_t id : ids) Put64(s, id);
}

// Reads within [p, end): every read checks what is left first.
class Reader {
 public:
  explicit Reader(std::string_view b) : p_(b.data()), end_(b.data() + b.size()) {}
  size_t left() const { return static_cast<size_t>(end_ - p_); }
  absl::Status U8(uint8_t* v) { return Fixed(v, 1); }
  absl::Status U32(uint32_t* v) { return Fixed(v, 4); }
  absl::Status U64(uint64_t* v) { return Fixed(v, 8); }
  absl::Status Bytes(std::string* out) {
    uint32_t n = 0;
    ZOOM_RETURN_IF_ERROR(U32(&n));
    if (n > left()) return Short("a length");
    out->assign(p_, n);
    p_ += n;
    return absl::OkStatus();
  }
  // A count of items of at least `min_item` bytes each: no more than the
  // bytes left could hold.
  absl::Status Count(uint32_t* n, size_t min_item) {
    ZOOM_RETURN_IF_ERROR(U32(n));
    if (static_cast<uint64_t>(*n) * min_item > left()) return Short("a count");
    return absl::OkStatus();
  }
  absl::Status Ids(std::vector<uint64_t>* ids) {
    uint32_t n = 0;
    ZOOM_RETURN_IF_ERROR(Count(&n, 8));
    ids->resize(n);
    for (uint32_t i = 0; i < n; ++i) ZOOM_RETURN_IF_ERROR(U64(&(*ids)[i]));
    return absl::OkStatus();
  }
  absl::Status Floats(std::vector<float>* out, uint32_t n) {
    if (static_cast<uint64_t>(n) * 4 > left()) return Short("a vector");
    out->resize(n);
    std::memcpy(out->data(), p_, static_cast<size_t>(n) * 4);  // little-endian host
    p_ += static_cast<size_t>(n) * 4;
    return absl::OkStatus();
  }
  absl::Status Fields(server::PayloadFields* out) {
    std::string bytes;
    ZOOM_RETURN_IF_ERROR(Bytes(&bytes));
    absl::StatusOr<server::PayloadFields> f = server::DecodeFields(bytes);
    if (!f.ok()) {
      return absl::Status(f.status().code(),
                          absl::StrCat("log entry: its payload fields: ", f.status().message()));
    }
    *out = *std::move(f);
    return absl::OkStatus();
  }

 private:
  template <typename T>
  absl::Status Fixed(T* v, int bytes) {
    if (left() < static_cast<size_t>(bytes)) return Short("a number");
    *v = static_cast<T>(GetLittleEndian(p_, bytes));
    p_ += bytes;
    return absl::OkStatus();
  }
  static absl::Status Short(const char* what) {
    return absl::DataLossError(absl::StrCat("log entry: ", what, " runs past its end"));
  }
  const char* p_;
  const char* end_;
};

}  // namespace

const char* LogOpName(LogOp op) {
  switch (op) {
    case LogOp::kUpsert: return "upsert";
    case LogOp::kDelete: return "delete";
    case LogOp::kSetPayload: return "set_payload";
    case LogOp::kDeletePayload: return "delete_payload";
    case LogOp::kCreateFieldIndex: return "create_field_index";
    case LogOp::kDeleteFieldIndex: return "delete_field_index";
  }
  return "unknown";
}

size_t UpsertEntryBytes(uint32_t dim, size_t points, size_t extra_bytes) {
  return kHeader + 8 + points * (8 + size_t{4} * dim + 8) + extra_bytes + kTrailer;
}

std::string EncodeLogEntry(const LogEntry& e) {
  std::string s(kMagic, 4);
  PutLittleEndian(&s, e.version == 0 ? 1 : 2, 2);
  s.push_back(static_cast<char>(e.op));
  s.push_back(0);
  if (e.version != 0) Put64(&s, e.version);
  switch (e.op) {
    case LogOp::kUpsert:
      Put32(&s, e.dim);
      Put32(&s, static_cast<uint32_t>(e.points.size()));
      for (const LogPoint& p : e.points) {
        Put64(&s, p.id);
        s.append(reinterpret_cast<const char*>(p.vector.data()), p.vector.size() * 4);
        PutBytes(&s, p.payload);
        PutBytes(&s, server::EncodeFields(p.fields));
      }
      break;
    case LogOp::kDelete:
      PutIds(&s, e.ids);
      break;
    case LogOp::kSetPayload:
      s.push_back(e.overwrite ? 1 : 0);
      PutIds(&s, e.ids);
      PutBytes(&s, server::EncodeFields(e.fields));
      break;
    case LogOp::kDeletePayload:
      PutIds(&s, e.ids);
      Put32(&s, static_cast<uint32_t>(e.keys.size()));
      for (const std::string& k : e.keys) PutBytes(&s, k);
      break;
    case LogOp::kCreateFieldIndex:
      s.push_back(static_cast<char>(e.index_type));
      PutBytes(&s, e.field);
      break;
    case LogOp::kDeleteFieldIndex:
      PutBytes(&s, e.field);
      break;
  }
  Put32(&s, Crc32c(s.data(), s.size()));
  return s;
}

absl::StatusOr<LogEntry> DecodeLogEntry(std::string_view bytes) {
  if (bytes.size() < kHeader + kTrailer || std::memcmp(bytes.data(), kMagic, 4) != 0) {
    return absl::DataLossError("log entry: not a zoomd log entry (no ZLOG header)");
  }
  const uint32_t crc = static_cast<uint32_t>(GetLittleEndian(bytes.data() + bytes.size() - 4, 4));
  if (Crc32c(bytes.data(), bytes.size() - 4) != crc) {
    return absl::DataLossError("log entry: CRC mismatch (corrupt)");
  }
  const uint16_t version = static_cast<uint16_t>(GetLittleEndian(bytes.data() + 4, 2));
  if (version > LogEntry::kVersion || version == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "log entry version ", version, " is not one this zoomd reads (1, 2): upgrade this node"));
  }
  if (bytes[7] != 0) return absl::DataLossError("log entry: its reserved header byte is not 0");
  LogEntry e;
  const uint8_t op = static_cast<uint8_t>(bytes[6]);
  if (op < 1 || op > 6) {
    return absl::FailedPreconditionError(
        absl::StrCat("log entry: unknown operation ", op, ": upgrade this node"));
  }
  e.op = static_cast<LogOp>(op);
  Reader r(bytes.substr(kHeader, bytes.size() - kHeader - kTrailer));
  if (version == 2) {
    ZOOM_RETURN_IF_ERROR(r.U64(&e.version));
    if (e.version == 0) return absl::DataLossError("log entry: a version-2 entry of version 0");
  }
  switch (e.op) {
    case LogOp::kUpsert: {
      uint32_t n = 0;
      ZOOM_RETURN_IF_ERROR(r.U32(&e.dim));
      if (e.dim == 0) return absl::DataLossError("log entry: an upsert of dimension 0");
      ZOOM_RETURN_IF_ERROR(r.Count(&n, 8 + size_t{4} * e.dim + 8));
      e.points.resize(n);
      for (LogPoint& p : e.points) {
        ZOOM_RETURN_IF_ERROR(r.U64(&p.id));
        ZOOM_RETURN_IF_ERROR(r.Floats(&p.vector, e.dim));
        ZOOM_RETURN_IF_ERROR(r.Bytes(&p.payload));
        ZOOM_RETURN_IF_ERROR(r.Fields(&p.fields));
      }
      break;
    }
    case LogOp::kDelete:
      ZOOM_RETURN_IF_ERROR(r.Ids(&e.ids));
      break;
    case LogOp::kSetPayload: {
      uint8_t overwrite = 0;
      ZOOM_RETURN_IF_ERROR(r.U8(&overwrite));
      if (overwrite > 1) return absl::DataLossError("log entry: overwrite flag not 0 or 1");
      e.overwrite = overwrite == 1;
      ZOOM_RETURN_IF_ERROR(r.Ids(&e.ids));
      ZOOM_RETURN_IF_ERROR(r.Fields(&e.fields));
      break;
    }
    case LogOp::kDeletePayload: {
      ZOOM_RETURN_IF_ERROR(r.Ids(&e.ids));
      uint32_t k = 0;
      ZOOM_RETURN_IF_ERROR(r.Count(&k, 4));
      e.keys.resize(k);
      for (std::string& key : e.keys) ZOOM_RETURN_IF_ERROR(r.Bytes(&key));
      break;
    }
    case LogOp::kCreateFieldIndex: {
      uint8_t type = 0;
      ZOOM_RETURN_IF_ERROR(r.U8(&type));
      if (type > static_cast<uint8_t>(server::FieldIndexType::kGeo)) {
        return absl::FailedPreconditionError(
            absl::StrCat("log entry: unknown field index type ", type, ": upgrade this node"));
      }
      e.index_type = static_cast<server::FieldIndexType>(type);
      ZOOM_RETURN_IF_ERROR(r.Bytes(&e.field));
      break;
    }
    case LogOp::kDeleteFieldIndex:
      ZOOM_RETURN_IF_ERROR(r.Bytes(&e.field));
      break;
  }
  if (r.left() != 0) {
    return absl::DataLossError(
        absl::StrCat("log entry: ", r.left(), " bytes after its ", LogOpName(e.op)));
  }
  return e;
}

absl::StatusOr<uint64_t> ApplyLogEntry(const LogEntry& e, server::Collection* c) {
  switch (e.op) {
    case LogOp::kUpsert: {
      if (e.dim != c->config().dim) {
        return absl::InvalidArgumentError(absl::StrCat("log entry: upsert of dimension ", e.dim,
                                                       " to a collection of ", c->config().dim));
      }
      std::vector<server::PointRef> refs;
      refs.reserve(e.points.size());
      for (const LogPoint& p : e.points) {
        refs.push_back({p.id, p.vector.data(), p.payload, p.fields.empty() ? nullptr : &p.fields});
      }
      ZOOM_RETURN_IF_ERROR(c->Upsert(refs));
      return refs.size();
    }
    case LogOp::kDelete:
      return c->Delete(e.ids);
    case LogOp::kSetPayload:
      return c->SetPayload(e.ids, e.fields, e.overwrite);
    case LogOp::kDeletePayload:
      return c->DeletePayload(e.ids, e.keys);
    case LogOp::kCreateFieldIndex:
      ZOOM_RETURN_IF_ERROR(c->field_indexes().Create(e.field, e.index_type));
      return 0;
    case LogOp::kDeleteFieldIndex:
      ZOOM_RETURN_IF_ERROR(c->field_indexes().Delete(e.field));
      return 0;
  }
  return absl::InternalError("log entry: unknown operation");
}

}  // namespace zoom::cluster
