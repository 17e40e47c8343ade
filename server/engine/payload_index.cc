#include "server/engine/payload_index.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "roaring/roaring.hh"

namespace zoom::server {
namespace {

constexpr const char* kTypeNames[] = {"keyword", "integer", "float", "bool", "geo"};

uint64_t RoaringBytes(const Roaring& r) {
  roaring_statistics_t st;
  roaring_bitmap_statistics(&r.roaring, &st);
  return sizeof(Roaring) + st.n_bytes_array_containers + st.n_bytes_run_containers +
         st.n_bytes_bitset_containers + uint64_t{st.n_containers} * 16;
}

// Adds r's values below out->size(), a container (2^16 ids) at a time: a
// bitset container's 1,024 words are OR'ed in (a broad tag costs
// microseconds, not a call per id), an array container's values and a run
// container's runs are set.
void AddRoaring(const Roaring& r, MatchSet* out) {
  const roaring_array_t& ra = r.roaring.high_low_container;
  std::vector<uint64_t>& words = out->words();
  const uint64_t size = out->size();
  for (int32_t i = 0; i < ra.size; ++i) {
    const uint64_t base = uint64_t{ra.keys[i]} << 16;
    if (base >= size) break;  // keys ascend
    uint8_t type = ra.typecodes[i];
    const void* c = container_unwrap_shared(ra.containers[i], &type);
    switch (type) {
      case BITSET_CONTAINER_TYPE_CODE: {
        const uint64_t* src = static_cast<const bitset_container_t*>(c)->array;
        const size_t first = base >> 6;
        const size_t n = std::min<size_t>(1024, words.size() - first);
        for (size_t w = 0; w < n; ++w) words[first + w] |= src[w];
        break;
      }
      case ARRAY_CONTAINER_TYPE_CODE: {
        const auto* a = static_cast<const array_container_t*>(c);
        for (int32_t j = 0; j < a->cardinality; ++j) {
          out->Set(static_cast<InternalId>(base + a->array[j]));
        }
        break;
      }
      case RUN_CONTAINER_TYPE_CODE: {
        const auto* run = static_cast<const run_container_t*>(c);
        for (int32_t j = 0; j < run->n_runs; ++j) {
          const uint64_t lo = base + run->runs[j].value;
          out->SetRange(lo, lo + run->runs[j].length + uint64_t{1});
        }
        break;
      }
      default: {  // not a kind this version of CRoaring has: value by value
        Roaring one;
        one.addRange(base, base + (uint64_t{1} << 16));
        one &= r;
        one.iterate(
            [](uint32_t v, void* p) {
              static_cast<MatchSet*>(p)->Set(v);
              return true;
            },
            out);
      }
    }
  }
  out->ClearPastSize();
}

struct GeoEntry {
  double lat;
  InternalId id;
  double lon;
  bool operator<(const GeoEntry& o) const {
    return std::tie(lat, id, lon) < std::tie(o.lat, o.id, o.lon);
  }
};

// The int64 a scan for values v with (double)v >= b starts at: floor(b)
// below 2^53 (exact there), else conservatively low (int64 -> double
// rounds by up to 1024 near 2^63, so v >= b - 4096 surely holds every
// match); callers test each entry exactly.
int64_t LowInt(double b) {
  // Below 2^53 in magnitude an int64 converts exactly: floor(b) is tight.
  if (std::fabs(b) < 9007199254740992.0) return static_cast<int64_t>(std::floor(b));
  constexpr double kTwo63 = 9223372036854775808.0;
  // (Every int64 from 2^63 - 512 on converts to 2^63.)
  if (b >= kTwo63) return std::numeric_limits<int64_t>::max() - 4096;
  const double lo = std::floor(b - 4096.0);
  if (lo <= -kTwo63) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(lo);
}

}  // namespace

absl::StatusOr<FieldIndexType> ParseFieldIndexType(std::string_view name) {
  for (uint8_t i = 0; i < 5; ++i) {
    if (name == kTypeNames[i]) return static_cast<FieldIndexType>(i);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown field index type '", std::string(name.substr(0, 32)),
      "'; use keyword, integer, float, bool or geo"));
}

const char* FieldIndexTypeName(FieldIndexType type) {
  const auto i = static_cast<uint8_t>(type);
  return i < 5 ? kTypeNames[i] : "unknown";
}

void AndLive(const IdTracker& ids, MatchSet* out) { ids.AndLive(out->words().data(), out->size()); }

// ---- One field's index -----------------------------------------------------------

struct PayloadIndex::Field {
  FieldIndexType type;
  bool ready = false;
  uint64_t generation = 0;  // AddField's number (a re-declared field gets a new one)
  Roaring nonempty;  // a value (or a list of at least one)
  Roaring nulls;
  absl::flat_hash_map<InternalId, FieldValue> lists;
  absl::flat_hash_map<std::string, Roaring> keywords;
  Roaring bool_true, bool_false;
  absl::btree_set<std::pair<int64_t, InternalId>> ints;
  absl::btree_set<std::pair<double, InternalId>> doubles;
  absl::btree_set<GeoEntry> geo;
  // Range bins (integer and float fields): up to kRangeBins bins of about
  // equal count over the numeric values, each the bitmap of the ids with a
  // value in it. A range ORs the bins wholly inside it and walks the
  // B-trees only within its two edge bins (a 50% range: about 1/8 of the
  // walk). Bin i holds the values in [cuts[i-1], cuts[i]) (the first from
  // -inf, the last to +inf). Drawn from the B-trees when the numeric
  // entries reach min_binned and again each time they have doubled since
  // (so a field that grows or drifts is re-cut; the cost, two walks of the
  // n entries under the writer's lock, is amortised over the n entries
  // added meanwhile).
  static constexpr size_t kRangeBins = 16;
  uint64_t min_binned = PayloadIndex::kDefaultMinBinned;
  std::vector<double> cuts;  // empty: no bins yet
  std::vector<Roaring> bins;
  uint64_t binned_entries = 0;

  size_t BinOf(double x) const {
    return static_cast<size_t>(std::upper_bound(cuts.begin(), cuts.end(), x) - cuts.begin());
  }
  void BinValue(double x, InternalId id, bool add) {
    if (cuts.empty()) return;
    Roaring& b = bins[BinOf(x)];
    add ? b.add(id) : b.remove(id);
  }
  // Re-cuts the bins when the numeric entries have doubled (see above).
  void MaybeRebin() {
    const uint64_t n = ints.size() + doubles.size();
    if (n < min_binned || n < 2 * binned_entries) return;
    // Two passes over the two trees merged in value order (nothing copied):
    // the cuts at every n/16-th value, then each entry into its bin.
    const auto each_in_order = [&](auto&& fn) {
      auto i = ints.begin();
      auto d = doubles.begin();
      while (i != ints.end() || d != doubles.end()) {
        if (d == doubles.end() || (i != ints.end() && static_cast<double>(i->first) < d->first)) {
          fn(static_cast<double>(i->first), i->second);
          ++i;
        } else {
          fn(d->first, d->second);
          ++d;
        }
      }
    };
    cuts.clear();
    uint64_t pos = 0;
    size_t next = 1;
    double first = 0;
    each_in_order([&](double x, InternalId) {
      if (pos == 0) first = x;
      if (next < kRangeBins && pos == next * n / kRangeBins) {
        if (x > first && (cuts.empty() || x > cuts.back())) cuts.push_back(x);
        ++next;
      }
      ++pos;
    });
    bins.assign(cuts.size() + 1, Roaring());
    each_in_order([&](double x, InternalId id) { bins[BinOf(x)].add(id); });
    for (Roaring& b : bins) b.runOptimize();
    binned_entries = n;
  }
  // The entries with a value x in [from, to) (to_inclusive: [from, to])
  // that `r` contains, into *out.
  void WalkRange(const RangeBounds& r, double from, double to, bool to_inclusive,
                 MatchSet* out) const {
    if (to_inclusive) {
      Walk<true>(r, from, to, out);
    } else {
      Walk<false>(r, from, to, out);
    }
  }
  template <bool kInclusive>
  void Walk(const RangeBounds& r, double from, double to, MatchSet* out) const {
    if (type == FieldIndexType::kInteger) {
      for (auto it = ints.lower_bound({LowInt(from), 0}); it != ints.end(); ++it) {
        const double x = static_cast<double>(it->first);
        if (kInclusive ? x > to : x >= to) break;
        if (r.Contains(x)) out->Set(it->second);
      }
    }
    for (auto it = doubles.lower_bound({from, 0}); it != doubles.end(); ++it) {
      if (kInclusive ? it->first > to : it->first >= to) break;
      if (r.Contains(it->first)) out->Set(it->second);
    }
  }

  void Apply(InternalId id, const FieldValue& v, bool add) {
    if (v.kind == FieldValue::Kind::kNull) {
      add ? nulls.add(id) : nulls.remove(id);
      return;
    }
    if (!v.values.empty()) add ? nonempty.add(id) : nonempty.remove(id);
    if (v.kind == FieldValue::Kind::kList) {
      if (add) {
        lists[id] = v;
      } else {
        lists.erase(id);
      }
    }
    for (const FieldScalar& s : v.values) {
      switch (type) {
        case FieldIndexType::kKeyword:
          if (const std::string* str = std::get_if<std::string>(&s)) {
            if (add) {
              keywords[*str].add(id);
            } else if (auto it = keywords.find(*str); it != keywords.end()) {
              it->second.remove(id);
              if (it->second.isEmpty()) keywords.erase(it);
            }
          }
          break;
        case FieldIndexType::kInteger:
          if (const int64_t* i = std::get_if<int64_t>(&s)) {
            add ? (void)ints.insert({*i, id}) : (void)ints.erase({*i, id});
            BinValue(static_cast<double>(*i), id, add);
          } else if (const double* d = std::get_if<double>(&s)) {
            add ? (void)doubles.insert({*d, id}) : (void)doubles.erase({*d, id});
            BinValue(*d, id, add);
          }
          break;
        case FieldIndexType::kFloat: {
          double x;
          bool num = true;
          if (const int64_t* i = std::get_if<int64_t>(&s)) {
            x = static_cast<double>(*i);
          } else if (const double* d = std::get_if<double>(&s)) {
            x = *d;
          } else {
            num = false;
          }
          if (num) {
            add ? (void)doubles.insert({x, id}) : (void)doubles.erase({x, id});
            BinValue(x, id, add);
          }
          break;
        }
        case FieldIndexType::kBool:
          if (const bool* b = std::get_if<bool>(&s)) {
            Roaring& r = *b ? bool_true : bool_false;
            add ? r.add(id) : r.remove(id);
          }
          break;
        case FieldIndexType::kGeo:
          if (const GeoPoint* g = std::get_if<GeoPoint>(&s)) {
            add ? (void)geo.insert({g->lat, id, g->lon}) : (void)geo.erase({g->lat, id, g->lon});
          }
          break;
      }
    }
    // (A removal's bins follow it above; the values removed are always all
    // of the id's in this field: Update removes the old value whole, then
    // adds the new one.)
    if (add && (type == FieldIndexType::kInteger || type == FieldIndexType::kFloat)) MaybeRebin();
  }

  // Whether a condition of `c`'s type can be answered by this index (the
  // field's other conditions: InvalidArgument from Check).
  absl::Status Check(const Condition& c) const {
    using T = Condition::Type;
    const auto needs = [&](const char* what, const char* types) {
      return absl::InvalidArgumentError(absl::StrCat(
          "field '", c.key.substr(0, 64), "' has a ", FieldIndexTypeName(type), " index; ", what,
          " needs ", types, " index (or no index: then it is evaluated from the stored payloads)"));
    };
    switch (c.type) {
      case T::kMatch:
        if (std::holds_alternative<std::string>(c.value) && type != FieldIndexType::kKeyword) {
          return needs("a string match", "a keyword");
        }
        if (std::holds_alternative<int64_t>(c.value) && type != FieldIndexType::kInteger) {
          return needs("an integer match", "an integer");
        }
        if (std::holds_alternative<bool>(c.value) && type != FieldIndexType::kBool) {
          return needs("a bool match", "a bool");
        }
        return absl::OkStatus();
      case T::kMatchAny:
      case T::kMatchExcept:
        if (std::holds_alternative<std::string>(c.values[0]) && type != FieldIndexType::kKeyword) {
          return needs("a string any/except", "a keyword");
        }
        if (std::holds_alternative<int64_t>(c.values[0]) && type != FieldIndexType::kInteger) {
          return needs("an integer any/except", "an integer");
        }
        return absl::OkStatus();
      case T::kRange:
        if (type != FieldIndexType::kInteger && type != FieldIndexType::kFloat) {
          return needs("a range", "an integer or a float");
        }
        return absl::OkStatus();
      case T::kGeoRadius:
      case T::kGeoBox:
        if (type != FieldIndexType::kGeo) return needs("a geo condition", "a geo");
        return absl::OkStatus();
      default:
        return absl::OkStatus();
    }
  }

  // The ids (any record) whose value satisfies `c`, OR-ed into *out.
  void Collect(const Condition& c, MatchSet* out) const {
    using T = Condition::Type;
    switch (c.type) {
      case T::kMatch:
      case T::kMatchAny: {
        const std::vector<FieldScalar> one{c.value};
        const std::vector<FieldScalar>& vals = c.type == T::kMatch ? one : c.values;
        for (const FieldScalar& v : vals) {
          if (const std::string* s = std::get_if<std::string>(&v)) {
            if (auto it = keywords.find(*s); it != keywords.end()) AddRoaring(it->second, out);
          } else if (const int64_t* i = std::get_if<int64_t>(&v)) {
            for (auto it = ints.lower_bound({*i, 0}); it != ints.end() && it->first == *i; ++it) {
              out->Set(it->second);
            }
          } else if (const bool* b = std::get_if<bool>(&v)) {
            AddRoaring(*b ? bool_true : bool_false, out);
          }
        }
        return;
      }
      case T::kMatchExcept: {
        // Single values: a value, not listed. Lists: their exact test.
        MatchSet listed(out->size());
        Condition any = c;
        any.type = T::kMatchAny;
        Collect(any, &listed);
        MatchSet have(out->size());
        AddRoaring(nonempty, &have);
        have.AndNot(listed);
        out->Or(have);
        for (const auto& [id, value] : lists) {
          if (FieldConditionMatches(c, &value)) out->Set(id);
        }
        return;
      }
      case T::kRange: {
        const RangeBounds& r = c.range;
        const double lo = r.gte ? *r.gte : r.gt ? *r.gt : -std::numeric_limits<double>::infinity();
        const double hi = r.lte ? *r.lte : r.lt ? *r.lt : std::numeric_limits<double>::infinity();
        if (cuts.empty()) {
          WalkRange(r, lo, hi, /*to_inclusive=*/true, out);
          return;
        }
        // Bins strictly between lo's and hi's hold only values in (lo, hi):
        // cuts[b0] > lo and cuts[b1 - 1] <= hi.
        const size_t b0 = BinOf(lo), b1 = BinOf(hi);
        for (size_t b = b0 + 1; b < b1; ++b) AddRoaring(bins[b], out);
        if (b0 == b1) {
          WalkRange(r, lo, hi, /*to_inclusive=*/true, out);
        } else {
          WalkRange(r, lo, cuts[b0], /*to_inclusive=*/false, out);
          WalkRange(r, cuts[b1 - 1], hi, /*to_inclusive=*/true, out);
        }
        return;
      }
      case T::kGeoRadius:
      case T::kGeoBox: {
        double lat_lo, lat_hi;
        if (c.type == T::kGeoBox) {
          lat_lo = c.bottom_right.lat;
          lat_hi = c.top_left.lat;
        } else {
          // A band of latitudes that holds the circle (1 degree of
          // latitude >= 110.5 km everywhere), widened a little.
          const double deg = c.radius_m / 110000.0 + 1e-6;
          lat_lo = c.center.lat - deg;
          lat_hi = c.center.lat + deg;
        }
        for (auto it = geo.lower_bound({lat_lo, 0, -1e9}); it != geo.end(); ++it) {
          if (it->lat > lat_hi) break;
          if (ScalarMatches(c, GeoPoint{it->lat, it->lon})) out->Set(it->id);
        }
        return;
      }
      case T::kIsNull:
        AddRoaring(nulls, out);
        return;
      case T::kIsEmpty: {
        MatchSet e(out->size());
        AddRoaring(nonempty, &e);
        e.Invert();
        out->Or(e);
        return;
      }
      case T::kValuesCount: {
        MatchSet e(out->size());
        if (c.range.Contains(1)) AddRoaring(nonempty, &e);
        if (c.range.Contains(0)) {
          MatchSet none(out->size());
          AddRoaring(nonempty, &none);
          none.Invert();
          e.Or(none);
        }
        for (const auto& [id, value] : lists) {
          e.Assign(id, c.range.Contains(static_cast<double>(value.values.size())));
        }
        out->Or(e);
        return;
      }
      case T::kHasId:
      case T::kNested:
        return;
    }
  }

  uint64_t Points() const {
    return nonempty.cardinality() + nulls.cardinality();
  }

  uint64_t Bytes() const {
    uint64_t b = sizeof(Field) + RoaringBytes(nonempty) + RoaringBytes(nulls) +
                 RoaringBytes(bool_true) + RoaringBytes(bool_false);
    for (const auto& [k, r] : keywords) b += k.capacity() + 32 + RoaringBytes(r);
    // B-tree nodes hold their values with about 1/4 slack.
    b += ints.size() * sizeof(std::pair<int64_t, InternalId>) * 5 / 4;
    b += doubles.size() * sizeof(std::pair<double, InternalId>) * 5 / 4;
    b += geo.size() * sizeof(GeoEntry) * 5 / 4;
    b += cuts.capacity() * sizeof(double);
    for (const Roaring& r : bins) b += RoaringBytes(r);
    for (const auto& [id, v] : lists) b += 48 + v.values.capacity() * sizeof(FieldScalar);
    return b;
  }
};

// ---- PayloadIndex ----------------------------------------------------------------

PayloadIndex::PayloadIndex(uint64_t min_binned) : min_binned_(std::max<uint64_t>(1, min_binned)) {}
PayloadIndex::~PayloadIndex() = default;

uint64_t PayloadIndex::AddField(const std::string& field, FieldIndexType type, bool ready) {
  auto f = std::make_unique<Field>();
  f->type = type;
  f->ready = ready;
  f->min_binned = min_binned_;
  absl::MutexLock l(&mu_);
  f->generation = ++generations_;
  const uint64_t g = f->generation;
  fields_[field] = std::move(f);
  return g;
}

void PayloadIndex::RemoveField(std::string_view field) {
  absl::MutexLock l(&mu_);
  if (auto it = fields_.find(field); it != fields_.end()) fields_.erase(it);
}

void PayloadIndex::MarkReady(std::string_view field, uint64_t generation) {
  absl::MutexLock l(&mu_);
  if (auto it = fields_.find(field);
      it != fields_.end() && (generation == 0 || it->second->generation == generation)) {
    it->second->ready = true;
  }
}

bool PayloadIndex::IsCurrent(std::string_view field, uint64_t generation) const {
  absl::ReaderMutexLock l(&mu_);
  auto it = fields_.find(field);
  return it != fields_.end() && it->second->generation == generation;
}

bool PayloadIndex::IsReady(std::string_view field) const {
  absl::ReaderMutexLock l(&mu_);
  auto it = fields_.find(field);
  return it != fields_.end() && it->second->ready;
}

void PayloadIndex::Update(InternalId id, const PayloadFields* before, const PayloadFields* after) {
  absl::MutexLock l(&mu_);
  for (auto& [name, field] : fields_) {
    const FieldValue* b = nullptr;
    const FieldValue* a = nullptr;
    if (before != nullptr) {
      if (auto it = before->find(name); it != before->end()) b = &it->second;
    }
    if (after != nullptr) {
      if (auto it = after->find(name); it != after->end()) a = &it->second;
    }
    if (b != nullptr && a != nullptr && *a == *b) continue;
    if (b != nullptr) field->Apply(id, *b, /*add=*/false);
    if (a != nullptr) field->Apply(id, *a, /*add=*/true);
  }
}

void PayloadIndex::Fill(std::string_view field, InternalId id, const FieldValue& value) {
  absl::MutexLock l(&mu_);
  if (auto it = fields_.find(field); it != fields_.end()) it->second->Apply(id, value, true);
}

bool PayloadIndex::HasField(std::string_view field) const {
  absl::ReaderMutexLock l(&mu_);
  return fields_.find(field) != fields_.end();
}

bool PayloadIndex::CanEvaluateLocked(const Filter& filter, std::string* unindexed,
                                     bool* building) const {
  for (const auto* list : {&filter.must, &filter.should, &filter.must_not, &filter.min_should}) {
    for (const Condition& c : *list) {
      if (c.type == Condition::Type::kNested) {
        if (!CanEvaluateLocked(*c.nested, unindexed, building)) return false;
        continue;
      }
      if (!c.IsFieldCondition()) continue;
      auto it = fields_.find(c.key);
      if (it == fields_.end() || !it->second->ready) {
        *unindexed = c.key;
        *building = it != fields_.end();
        return false;
      }
    }
  }
  return true;
}

bool PayloadIndex::CanEvaluate(const Filter& filter, std::string* unindexed,
                               bool* building) const {
  absl::ReaderMutexLock l(&mu_);
  *building = false;
  return CanEvaluateLocked(filter, unindexed, building);
}

absl::Status PayloadIndex::EvalCondition(const Condition& c, const IdTracker& ids,
                                         MatchSet* out) const {
  if (c.type == Condition::Type::kHasId) {
    std::vector<uint64_t> ext(c.ids.begin(), c.ids.end());
    std::vector<std::optional<InternalId>> found;
    ids.FindAll(ext, &found);
    absl::flat_hash_set<uint64_t> newer;  // named by a record not yet visible here
    for (size_t i = 0; i < found.size(); ++i) {
      if (!found[i].has_value()) continue;
      if (*found[i] < out->size()) {
        out->Set(*found[i]);
      } else {
        newer.insert(ext[i]);
      }
    }
    if (!newer.empty()) {
      // An upsert in flight: the map already names its new record, whose
      // predecessor is still the live one below size(). Rare: find it.
      for (InternalId id = 0; id < out->size(); ++id) {
        if (ids.IsLive(id) && newer.contains(ids.External(id))) out->Set(id);
      }
    }
    return absl::OkStatus();
  }
  if (c.type == Condition::Type::kNested) {
    MatchSet sub(out->size());
    if (absl::Status st = EvalFilter(*c.nested, ids, &sub); !st.ok()) return st;
    out->Or(sub);
    return absl::OkStatus();
  }
  auto it = fields_.find(c.key);
  if (it == fields_.end() || !it->second->ready) {
    return absl::FailedPreconditionError(
        absl::StrCat("field '", c.key.substr(0, 64), "' has no ready index"));
  }
  if (absl::Status st = it->second->Check(c); !st.ok()) return st;
  it->second->Collect(c, out);
  return absl::OkStatus();
}

absl::Status PayloadIndex::EvalFilter(const Filter& f, const IdTracker& ids, MatchSet* out) const {
  out->SetAll();
  MatchSet one(out->size());
  for (const Condition& c : f.must) {
    one.Reset(out->size());
    if (absl::Status st = EvalCondition(c, ids, &one); !st.ok()) return st;
    out->And(one);
  }
  for (const Condition& c : f.must_not) {
    one.Reset(out->size());
    if (absl::Status st = EvalCondition(c, ids, &one); !st.ok()) return st;
    out->AndNot(one);
  }
  if (!f.should.empty()) {
    MatchSet any(out->size());
    for (const Condition& c : f.should) {
      if (absl::Status st = EvalCondition(c, ids, &any); !st.ok()) return st;
    }
    out->And(any);
  }
  if (!f.min_should.empty()) {
    std::vector<uint16_t> counts(out->size(), 0);
    for (const Condition& c : f.min_should) {
      one.Reset(out->size());
      if (absl::Status st = EvalCondition(c, ids, &one); !st.ok()) return st;
      one.ForEach([&](InternalId id) { ++counts[id]; });
    }
    for (uint64_t id = 0; id < out->size(); ++id) {
      if (counts[id] < f.min_should_count) out->Clear(static_cast<InternalId>(id));
    }
  }
  return absl::OkStatus();
}

absl::Status PayloadIndex::Evaluate(const Filter& filter, const IdTracker& ids, uint64_t size,
                                    MatchSet* out) const {
  out->Reset(size);
  absl::ReaderMutexLock l(&mu_);
  std::string unindexed;
  bool building = false;
  if (!CanEvaluateLocked(filter, &unindexed, &building)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "field '", unindexed.substr(0, 64), "' has no ", building ? "ready " : "", "index"));
  }
  if (absl::Status st = EvalFilter(filter, ids, out); !st.ok()) return st;
  AndLive(ids, out);
  return absl::OkStatus();
}

std::vector<FieldIndexInfo> PayloadIndex::Info() const {
  absl::ReaderMutexLock l(&mu_);
  std::vector<FieldIndexInfo> out;
  for (const auto& [name, f] : fields_) {
    out.push_back({name, f->type, f->ready, f->Points(), f->Bytes()});
  }
  return out;
}

uint64_t PayloadIndex::Bytes() const {
  absl::ReaderMutexLock l(&mu_);
  uint64_t b = 0;
  for (const auto& [name, f] : fields_) b += name.capacity() + f->Bytes();
  return b;
}

}  // namespace zoom::server
