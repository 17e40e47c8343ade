#include "server/engine/field_edits.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace zoom::server {
namespace {

constexpr uint8_t kVersion = 1;

void PutLe(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

class Reader {
 public:
  explicit Reader(std::string_view b) : b_(b) {}
  bool Le(int bytes, uint64_t* v) {
    if (b_.size() - pos_ < static_cast<size_t>(bytes)) return false;
    *v = 0;
    for (int i = 0; i < bytes; ++i) {
      *v |= uint64_t{static_cast<uint8_t>(b_[pos_ + i])} << (8 * i);
    }
    pos_ += bytes;
    return true;
  }
  bool Bytes(size_t n, std::string_view* out) {
    if (b_.size() - pos_ < n) return false;
    *out = b_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  bool done() const { return pos_ == b_.size(); }

 private:
  std::string_view b_;
  size_t pos_ = 0;
};

}  // namespace

uint64_t FieldEdits::FloorOf(std::string_view name) const {
  auto it = keys.find(name);
  return std::max(reset, it == keys.end() ? 0 : it->second.version);
}

void FieldEdits::Prune(uint64_t version) {
  if (reset <= version) reset = 0;
  for (auto it = keys.begin(); it != keys.end();) {
    it = it->second.version <= version ? keys.erase(it) : std::next(it);
  }
}

PayloadFields FieldEdits::Over(const PayloadFields& base) const {
  PayloadFields out = reset > 0 ? PayloadFields{} : base;
  for (const auto& [name, edit] : keys) {
    if (edit.value.has_value()) {
      out[name] = *edit.value;
    } else {
      out.erase(name);
    }
  }
  return out;
}

std::string EncodeFieldEdits(const FieldEdits& edits) {
  if (edits.empty()) return "";
  std::string out = "ZE";
  out.push_back(static_cast<char>(kVersion));
  PutLe(&out, edits.reset, 8);
  PutLe(&out, edits.keys.size(), 4);
  PayloadFields set;
  for (const auto& [name, edit] : edits.keys) {
    PutLe(&out, name.size(), 2);
    out += name;
    PutLe(&out, edit.version, 8);
    out.push_back(edit.value.has_value() ? 1 : 0);
    if (edit.value.has_value()) set.emplace(name, *edit.value);
  }
  const std::string fields = set.empty() ? "" : EncodeFields(set);
  PutLe(&out, fields.size(), 4);
  out += fields;
  return out;
}

absl::StatusOr<FieldEdits> DecodeFieldEdits(std::string_view bytes) {
  FieldEdits e;
  if (bytes.empty()) return e;
  auto bad = [](const std::string& what) {
    return absl::DataLossError(absl::StrCat("a point's field edits: ", what));
  };
  Reader r(bytes);
  std::string_view magic;
  uint64_t version = 0, n = 0;
  if (!r.Bytes(2, &magic) || magic != "ZE" || !r.Le(1, &version)) return bad("no header");
  if (version != kVersion) return bad(absl::StrCat("version ", version, ", not ", kVersion));
  if (!r.Le(8, &e.reset) || !r.Le(4, &n)) return bad("cut short");
  std::map<std::string, bool, std::less<>> set_of;
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t len = 0, v = 0, set = 0;
    std::string_view name;
    if (!r.Le(2, &len) || !r.Bytes(len, &name) || !r.Le(8, &v) || !r.Le(1, &set) || set > 1) {
      return bad("cut short");
    }
    if (!e.keys.empty() && e.keys.rbegin()->first >= name) return bad("names out of order");
    e.keys.emplace(std::string(name), FieldEdit{v, std::nullopt});
    set_of.emplace(std::string(name), set == 1);
  }
  uint64_t len = 0;
  std::string_view fields;
  if (!r.Le(4, &len) || !r.Bytes(len, &fields) || !r.done()) return bad("cut short");
  PayloadFields values;
  if (!fields.empty()) {
    absl::StatusOr<PayloadFields> decoded = DecodeFields(fields);
    if (!decoded.ok()) return bad(std::string(decoded.status().message()));
    values = std::move(*decoded);
  }
  size_t matched = 0;
  for (auto& [name, edit] : e.keys) {
    if (!set_of[name]) continue;
    auto it = values.find(name);
    if (it == values.end()) return bad(absl::StrCat("no value for field '", name, "'"));
    edit.value = std::move(it->second);
    ++matched;
  }
  if (matched != values.size()) return bad("a value for a field not set");
  return e;
}

}  // namespace zoom::server
