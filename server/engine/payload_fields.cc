#include "server/engine/payload_fields.h"

#include <cmath>
#include <cstring>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "common/endian.h"

namespace zoom::server {
namespace {

constexpr char kMagic[2] = {'Z', 'F'};
constexpr uint8_t kVersion = 1;

void PutDouble(std::string* out, double d) {
  uint64_t bits;
  std::memcpy(&bits, &d, sizeof(bits));
  PutLittleEndian(out, bits, 8);
}

void PutScalar(std::string* out, const FieldScalar& v) {
  out->push_back(static_cast<char>(v.index() + 1));
  switch (v.index()) {
    case 0: {
      const std::string& s = std::get<std::string>(v);
      PutLittleEndian(out, s.size(), 4);
      out->append(s);
      break;
    }
    case 1:
      PutLittleEndian(out, static_cast<uint64_t>(std::get<int64_t>(v)), 8);
      break;
    case 2:
      PutDouble(out, std::get<double>(v));
      break;
    case 3:
      out->push_back(std::get<bool>(v) ? 1 : 0);
      break;
    case 4:
      PutDouble(out, std::get<GeoPoint>(v).lat);
      PutDouble(out, std::get<GeoPoint>(v).lon);
      break;
  }
}

// A cursor over the bytes being decoded; every read checks the length.
class Reader {
 public:
  explicit Reader(std::string_view b) : b_(b) {}
  bool Has(size_t n) const { return b_.size() - pos_ >= n; }
  bool done() const { return pos_ == b_.size(); }
  bool Int(int bytes, uint64_t* v) {
    if (!Has(bytes)) return false;
    *v = GetLittleEndian(b_.data() + pos_, bytes);
    pos_ += bytes;
    return true;
  }
  bool Bytes(size_t n, std::string* out) {
    if (!Has(n)) return false;
    out->assign(b_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool Double(double* d) {
    uint64_t bits;
    if (!Int(8, &bits)) return false;
    std::memcpy(d, &bits, sizeof(bits));
    return true;
  }

 private:
  std::string_view b_;
  size_t pos_ = 0;
};

bool GetScalar(Reader* r, FieldScalar* v) {
  uint64_t tag;
  if (!r->Int(1, &tag)) return false;
  switch (tag) {
    case 1: {
      uint64_t n;
      std::string s;
      if (!r->Int(4, &n) || !r->Bytes(n, &s)) return false;
      *v = std::move(s);
      return true;
    }
    case 2: {
      uint64_t x;
      if (!r->Int(8, &x)) return false;
      *v = static_cast<int64_t>(x);
      return true;
    }
    case 3: {
      double d;
      if (!r->Double(&d)) return false;
      *v = d;
      return true;
    }
    case 4: {
      uint64_t b;
      if (!r->Int(1, &b) || b > 1) return false;
      *v = b == 1;
      return true;
    }
    case 5: {
      GeoPoint g;
      if (!r->Double(&g.lat) || !r->Double(&g.lon)) return false;
      *v = g;
      return true;
    }
    default:
      return false;
  }
}

// Well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, at most
// U+10FFFF), as protobuf requires of a string field: a stored name or
// string that is not would fail every later answer that carries it.
bool IsUtf8(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2, cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3, cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4, cp = c & 0x07;
    } else {
      return false;
    }
    if (n - i < len) return false;
    for (size_t j = 1; j < len; ++j) {
      const auto cc = static_cast<unsigned char>(s[i + j]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10FFFF))) {
      return false;
    }
    i += len;
  }
  return true;
}

absl::Status CheckScalar(const std::string& name, const FieldScalar& v) {
  if (const std::string* str = std::get_if<std::string>(&v); str != nullptr && !IsUtf8(*str)) {
    return absl::InvalidArgumentError(
        absl::StrCat("field '", name, "': a string value that is not valid UTF-8"));
  }
  if (const double* d = std::get_if<double>(&v); d != nullptr && !std::isfinite(*d)) {
    return absl::InvalidArgumentError(
        absl::StrCat("field '", name, "': ", *d, " is not a finite number"));
  }
  if (const GeoPoint* g = std::get_if<GeoPoint>(&v); g != nullptr) {
    if (!(g->lat >= -90 && g->lat <= 90) || !(g->lon >= -180 && g->lon <= 180)) {
      return absl::InvalidArgumentError(
          absl::StrCat("field '", name, "': geo point (lat ", g->lat, ", lon ", g->lon,
                       ") is off the globe; lat must be in -90..90 and lon in -180..180"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateFields(const PayloadFields& fields, const FieldLimits& limits) {
  if (fields.size() > limits.max_fields) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a point has ", fields.size(), " payload fields; at most ", limits.max_fields));
  }
  for (const auto& [name, value] : fields) {
    if (name.empty()) return absl::InvalidArgumentError("a payload field has an empty name");
    if (name.size() > limits.max_name_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("payload field name '", name.substr(0, 32),
                                                     "...' has ", name.size(),
                                                     " bytes; at most ", limits.max_name_bytes));
    }
    if (name.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError("a payload field name holds a NUL byte");
    }
    if (!IsUtf8(name)) {
      return absl::InvalidArgumentError("a payload field name is not valid UTF-8");
    }
    switch (value.kind) {
      case FieldValue::Kind::kNull:
        if (!value.values.empty()) {
          return absl::InvalidArgumentError(absl::StrCat("field '", name, "': null with values"));
        }
        break;
      case FieldValue::Kind::kScalar:
        if (value.values.size() != 1) {
          return absl::InvalidArgumentError(
              absl::StrCat("field '", name, "': a single value holds ", value.values.size()));
        }
        break;
      case FieldValue::Kind::kList:
        if (value.values.size() > limits.max_list_values) {
          return absl::InvalidArgumentError(
              absl::StrCat("field '", name, "': a list of ", value.values.size(),
                           " values; at most ", limits.max_list_values));
        }
        break;
    }
    for (const FieldScalar& v : value.values) {
      if (absl::Status st = CheckScalar(name, v); !st.ok()) return st;
    }
  }
  return absl::OkStatus();
}

std::string EncodeFields(const PayloadFields& fields) {
  if (fields.empty()) return "";
  std::string out(kMagic, 2);
  out.push_back(static_cast<char>(kVersion));
  PutLittleEndian(&out, fields.size(), 4);
  for (const auto& [name, value] : fields) {
    PutLittleEndian(&out, name.size(), 2);
    out.append(name);
    out.push_back(static_cast<char>(value.kind));
    if (value.kind == FieldValue::Kind::kScalar) {
      PutScalar(&out, value.values.front());
    } else if (value.kind == FieldValue::Kind::kList) {
      PutLittleEndian(&out, value.values.size(), 4);
      for (const FieldScalar& v : value.values) PutScalar(&out, v);
    }
  }
  return out;
}

absl::StatusOr<PayloadFields> DecodeFields(std::string_view bytes) {
  PayloadFields fields;
  if (bytes.empty()) return fields;
  const auto bad = [](const char* what) {
    return absl::DataLossError(absl::StrCat("stored payload fields are corrupt: ", what));
  };
  if (bytes.size() < 3 || bytes[0] != kMagic[0] || bytes[1] != kMagic[1]) return bad("no magic");
  const uint8_t version = static_cast<uint8_t>(bytes[2]);
  if (version != kVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "stored payload fields have version ", version, "; this zoomd reads version ",
        kVersion, " (written by a newer zoomd?)"));
  }
  Reader r(bytes.substr(3));
  uint64_t n;
  if (!r.Int(4, &n)) return bad("truncated count");
  if (n == 0) return bad("no fields in a header (no fields are stored as nothing)");
  const std::string* previous = nullptr;
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t len, kind;
    std::string name;
    if (!r.Int(2, &len) || !r.Bytes(len, &name) || !r.Int(1, &kind)) return bad("truncated field");
    if (previous != nullptr && !(*previous < name)) return bad("names out of order");
    FieldValue value;
    if (kind == 1) {
      value.kind = FieldValue::Kind::kScalar;
      FieldScalar v;
      if (!GetScalar(&r, &v)) return bad("bad value");
      value.values.push_back(std::move(v));
    } else if (kind == 2) {
      value.kind = FieldValue::Kind::kList;
      uint64_t count;
      if (!r.Int(4, &count) || !r.Has(count)) return bad("bad list");  // >= 1 byte each
      value.values.resize(count);
      for (FieldScalar& v : value.values) {
        if (!GetScalar(&r, &v)) return bad("bad list value");
      }
    } else if (kind != 0) {
      return bad("bad kind");
    }
    auto [it, inserted] = fields.emplace(std::move(name), std::move(value));
    previous = &it->first;
  }
  if (!r.done()) return bad("trailing bytes");
  return fields;
}

}  // namespace zoom::server
