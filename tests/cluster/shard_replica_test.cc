// ShardReplica against a real nats-server: replicas of a shard apply its
// subject in stream order and end equal to each other and to a model of
// the writes; a restarted replica goes on after its log position (nothing
// applied twice); a replica restored from a peer's snapshot catches up from
// the snapshot's position; entries refused by the collection are passed on
// every replica alike; an entry that cannot be decoded stops the replica;
// a NATS restart is waited out; a log that lost an acknowledged tail is
// repaired from the replicas (log_repair.h).
#include "server/cluster/shard_replica.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/cluster/log_entry.h"
#include "server/cluster/router/ack_board.h"
#include "server/cluster/versioned_apply.h"
#include "server/engine/database.h"
#include "tests/testing/nats_server.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_env.h"

namespace zoom::cluster {
namespace {

using server::Collection;
using server::CollectionConfig;
using server::Database;
using server::DatabaseOptions;
using server::PointData;
using ::testing::HasSubstr;
using ::zoom::testing::NatsServer;
using ::zoom::testing::TempDir;

constexpr uint32_t kDim = 4;
constexpr const char* kStream = "c_docs";
const std::string kShard0 = "zoomd.docs.0";
const std::string kShard1 = "zoomd.docs.1";

// id -> (vector, payload): a collection's contents, or the model of them.
using Contents = std::map<uint64_t, std::pair<std::vector<float>, std::string>>;

Contents Dump(const Collection& c) {
  Contents out;
  std::optional<uint64_t> next = 0;
  while (next.has_value()) {
    std::vector<PointData> page;
    bool scan = false;
    const uint64_t from = *next;
    EXPECT_OK(c.Scroll(nullptr, from, 1000, true, true, &page, &next, &scan));
    for (PointData& p : page) out[p.id] = {std::move(p.vector), std::move(p.payload)};
  }
  return out;
}

class ShardReplicaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::NatsServerBinary().empty()) GTEST_SKIP() << "nats-server not installed";
    nats_ = std::make_unique<NatsServer>("solo", dir_.File("nats"));
    ASSERT_TRUE(nats_->Start()) << nats_->Log();
    JetStreamOptions o;
    o.servers = {nats_->url()};
    ASSERT_OK_AND_ASSIGN(js_, JetStream::Connect(o));
    ASSERT_OK(js_->EnsureStream({kStream, {kShard0, kShard1}}));
    DatabaseOptions d;
    d.data_dir = dir_.File("data");
    d.collection.auto_build_min_points = 0;
    ASSERT_OK_AND_ASSIGN(db_, Database::Open(d));
  }
  void TearDown() override {
    replicas_.clear();
    db_.reset();
  }

  std::shared_ptr<Collection> Local(const std::string& name) {
    CollectionConfig cfg;
    cfg.name = name;
    cfg.dim = kDim;
    auto c = db_->CreateCollection(cfg);
    EXPECT_OK(c.status());
    return c.ok() ? *c : nullptr;
  }
  ShardReplica* StartReplica(const std::string& node, std::shared_ptr<Collection> c) {
    ShardReplicaOptions o;
    o.stream = kStream;
    o.subject = kShard0;
    o.durable = absl::StrCat(node, "_docs_0");
    auto r = ShardReplica::Start(js_.get(), std::move(c), o);
    EXPECT_OK(r.status());
    if (!r.ok()) return nullptr;
    replicas_[node] = std::move(*r);
    return replicas_[node].get();
  }

  // Shard 0's options, fetching and retrying every 50 ms.
  static ShardReplicaOptions QuickOptions(const std::string& durable) {
    ShardReplicaOptions o;
    o.stream = kStream;
    o.subject = kShard0;
    o.durable = durable;
    o.fetch_wait = absl::Milliseconds(50);
    o.retry_wait = absl::Milliseconds(50);
    return o;
  }

  // Publishes the entry on `subject` and applies it to the model of shard 0.
  uint64_t Publish(const LogEntry& e, const std::string& subject = kShard0) {
    auto ack = js_->Publish(subject, EncodeLogEntry(e));
    EXPECT_OK(ack.status());
    if (subject == kShard0 && ack.ok()) ApplyToModel(e);
    return ack.ok() ? ack->sequence : 0;
  }
  void ApplyToModel(const LogEntry& e) {
    if (e.op == LogOp::kUpsert && e.dim == kDim) {
      for (const LogPoint& p : e.points) model_[p.id] = {p.vector, p.payload};
    } else if (e.op == LogOp::kDelete) {
      for (uint64_t id : e.ids) model_.erase(id);
    }
  }
  static LogEntry Upsert(uint64_t first, int n, float salt) {
    LogEntry e;
    e.op = LogOp::kUpsert;
    e.dim = kDim;
    for (int i = 0; i < n; ++i) {
      const float x = static_cast<float>(first + i) + salt;
      e.points.push_back({first + i, {x, -x, x * 0.5f, 1.0f}, absl::StrCat("p", first + i, "/", salt),
                          {}});
    }
    return e;
  }
  static LogEntry Delete(std::vector<uint64_t> ids) {
    LogEntry e;
    e.op = LogOp::kDelete;
    e.ids = std::move(ids);
    return e;
  }
  static bool Applied(ShardReplica* r, uint64_t seq) {
    return r->WaitApplied(seq, absl::Now() + absl::Seconds(60));
  }

  TempDir dir_;
  std::unique_ptr<NatsServer> nats_;
  std::unique_ptr<JetStream> js_;
  std::unique_ptr<Database> db_;
  std::map<std::string, std::unique_ptr<ShardReplica>> replicas_;
  Contents model_;
};

TEST_F(ShardReplicaTest, ReplicasApplyInOrderRestartAfterTheirPositionAndBootstrapFromSnapshots) {
  auto a = Local("docs_s0_a");
  auto b = Local("docs_s0_b");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  // Writes before the replicas start, shard 1's interleaved (not theirs).
  for (int i = 0; i < 5; ++i) {
    Publish(Upsert(i * 20, 20, 0.0f));
    Publish(Upsert(1000 + i, 1, 0.0f), kShard1);
  }
  Publish(Delete({3, 4, 5, 999}));
  Publish(Upsert(10, 5, 0.25f));  // overwrites
  ShardReplica* ra = StartReplica("a", a);
  ShardReplica* rb = StartReplica("b", b);
  ASSERT_NE(ra, nullptr);
  ASSERT_NE(rb, nullptr);
  // Writes while they run; one the collection refuses (its dimension),
  // passed by both.
  LogEntry wrong = Upsert(500, 1, 0.0f);
  wrong.dim = kDim + 1;
  for (LogPoint& p : wrong.points) p.vector.push_back(0.0f);
  Publish(wrong);
  uint64_t last = Publish(Upsert(100, 10, 0.5f));
  ASSERT_TRUE(Applied(ra, last)) << ra->status().last_error;
  ASSERT_TRUE(Applied(rb, last)) << rb->status().last_error;
  EXPECT_EQ(Dump(*a), model_);
  EXPECT_EQ(Dump(*b), model_);
  EXPECT_EQ(model_.size(), 107u);
  EXPECT_EQ(ra->status().skipped, 1u);
  EXPECT_EQ(rb->status().skipped, 1u);
  EXPECT_EQ(a->log_position(), last);
  EXPECT_TRUE(ra->status().caught_up || ra->status().pending == 0);
  EXPECT_EQ(ra->status().entries, 9u);  // 7 + the refused one + the last

  // Replica a stops; writes go on; it starts again after its position.
  replicas_.erase("a");
  Publish(Delete({100, 101}));
  last = Publish(Upsert(200, 3, 0.0f));
  ra = StartReplica("a", a);
  ASSERT_NE(ra, nullptr);
  ASSERT_TRUE(Applied(ra, last)) << ra->status().last_error;
  EXPECT_EQ(ra->status().entries, 2u);  // only what it had not applied
  EXPECT_EQ(Dump(*a), model_);

  // A new replica c from a snapshot of b: resumes after the snapshot's
  // position, not from the start of the stream.
  ASSERT_TRUE(Applied(rb, last));
  ASSERT_OK_AND_ASSIGN(server::SnapshotInfo snap, db_->CreateSnapshot("docs_s0_b"));
  const uint64_t at_snapshot = b->log_position();
  last = Publish(Upsert(300, 2, 0.0f));
  ASSERT_OK_AND_ASSIGN(auto file, db_->SnapshotFile("docs_s0_b", snap.name));
  ASSERT_OK_AND_ASSIGN(auto c, db_->RestoreSnapshot(file.first, "docs_s0_c", false));
  EXPECT_EQ(c->log_position(), at_snapshot);
  ShardReplica* rc = StartReplica("c", c);
  ASSERT_NE(rc, nullptr);
  ASSERT_TRUE(Applied(rc, last)) << rc->status().last_error;
  EXPECT_EQ(rc->status().entries, 1u);
  EXPECT_EQ(Dump(*c), model_);
  ASSERT_TRUE(Applied(rb, last));
  EXPECT_EQ(Dump(*b), model_);

  // An entry nobody can decode stops every replica at it: none applies
  // what follows.
  ASSERT_OK(js_->Publish(kShard0, "not a log entry").status());
  const uint64_t after = Publish(Upsert(400, 1, 0.0f));
  EXPECT_FALSE(ra->WaitApplied(after, absl::Now() + absl::Seconds(60)));
  EXPECT_TRUE(ra->status().failed);
  EXPECT_THAT(ra->status().last_error, HasSubstr("DATA_LOSS"));
  EXPECT_EQ(a->log_position(), last);
}

// Write concerns: a replica reports its position once what it applied is
// durable (options.sync), with each entry it applied (sequence, message id)
// and the points each counting entry changed, and
// again while idle; a failing sync holds the report back. Notices can be
// lost (core NATS): the first report of entry w-0042 is dropped here, and
// its repeat acknowledges it.
TEST_F(ShardReplicaTest, DurablePositionsAreReportedWithCountsAndOnlyAfterTheSync) {
  auto a = Local("docs_s0_a");
  ASSERT_NE(a, nullptr);
  struct Reports {
    absl::Mutex mu;
    std::vector<uint64_t> positions ABSL_GUARDED_BY(mu);
    std::map<uint64_t, uint64_t> changed ABSL_GUARDED_BY(mu);  // sequence -> count
    std::map<uint64_t, std::string> ids ABSL_GUARDED_BY(mu);   // every entry reported
    int repeated ABSL_GUARDED_BY(mu) = 0;  // reports of the position before
    int entry_repeats ABSL_GUARDED_BY(mu) = 0;  // entries reported again
    bool dropped ABSL_GUARDED_BY(mu) = false;   // the report with w-0042 was lost
    bool fail_sync ABSL_GUARDED_BY(mu) = false;
    int syncs ABSL_GUARDED_BY(mu) = 0;
  } r;
  ShardReplicaOptions o = QuickOptions("a_docs_0");
  o.report_every = absl::Milliseconds(50);
  o.sync = [&r]() -> absl::Status {
    absl::MutexLock l(&r.mu);
    ++r.syncs;
    return r.fail_sync ? absl::UnavailableError("disk away") : absl::OkStatus();
  };
  o.on_durable = [&r](uint64_t durable, const std::vector<AppliedEntry>& applied) {
    absl::MutexLock l(&r.mu);
    if (!r.dropped && std::any_of(applied.begin(), applied.end(), [](const AppliedEntry& e) {
          return e.id == "w-0042";
        })) {
      r.dropped = true;  // lost on the way
      return;
    }
    if (!r.positions.empty() && r.positions.back() == durable) ++r.repeated;
    r.positions.push_back(durable);
    for (const AppliedEntry& e : applied) {
      EXPECT_LE(e.sequence, durable);
      auto [at, fresh] = r.ids.emplace(e.sequence, e.id);
      EXPECT_EQ(at->second, e.id) << e.sequence;  // a repeat is the same entry
      if (!fresh) ++r.entry_repeats;
      if (e.changed.has_value()) {
        auto [c, fresh_count] = r.changed.emplace(e.sequence, *e.changed);
        EXPECT_EQ(c->second, *e.changed) << e.sequence;
      }
    }
  };
  auto reported = [&r](uint64_t seq) {
    absl::MutexLock l(&r.mu);
    auto done = [&]() ABSL_SHARED_LOCKS_REQUIRED(r.mu) {
      return !r.positions.empty() && r.positions.back() >= seq;
    };
    return r.mu.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(60));
  };
  ASSERT_OK_AND_ASSIGN(auto ra, ShardReplica::Start(js_.get(), a, o));
  const uint64_t first = Publish(Upsert(0, 10, 0.0f));
  ASSERT_OK_AND_ASSIGN(PubAck named,
                       js_->Publish(kShard0, EncodeLogEntry(Delete({3, 4, 99})), "w-0042"));
  const uint64_t del = named.sequence;
  const uint64_t last = Publish(Upsert(20, 2, 0.0f));
  ASSERT_TRUE(Applied(ra.get(), last)) << ra->status().last_error;
  ASSERT_TRUE(reported(last));
  EXPECT_EQ(ra->status().durable, last);
  {
    absl::MutexLock l(&r.mu);
    auto all_three = [&]() ABSL_SHARED_LOCKS_REQUIRED(r.mu) {
      return r.ids.size() == 3 && r.entry_repeats > 0;
    };
    EXPECT_TRUE(r.mu.AwaitWithTimeout(absl::Condition(&all_three), absl::Seconds(60)))
        << "the lost report's entry is reported again";
    EXPECT_TRUE(r.dropped);
    EXPECT_TRUE(std::is_sorted(r.positions.begin(), r.positions.end()));
    // Every entry by sequence and id; counts for the counting one only,
    // the points it deleted (99 did not exist).
    EXPECT_EQ(r.ids, (std::map<uint64_t, std::string>{{first, ""}, {del, "w-0042"}, {last, ""}}));
    EXPECT_EQ(r.changed, (std::map<uint64_t, uint64_t>{{del, 2}}));
    EXPECT_GT(r.syncs, 0);
    auto twice = [&]() ABSL_SHARED_LOCKS_REQUIRED(r.mu) { return r.repeated >= 2; };
    EXPECT_TRUE(r.mu.AwaitWithTimeout(absl::Condition(&twice), absl::Seconds(60)))
        << "an idle replica reports its position again";
    r.fail_sync = true;
  }
  // Applied, not durable: no report of it while the sync fails.
  const uint64_t held = Publish(Delete({20}));
  ASSERT_TRUE(Applied(ra.get(), held));
  EXPECT_LT(ra->status().durable, held);
  {
    absl::MutexLock l(&r.mu);
    EXPECT_LT(r.positions.back(), held);
    r.fail_sync = false;
  }
  ASSERT_TRUE(reported(held));
  EXPECT_EQ(ra->status().durable, held);
  absl::MutexLock l(&r.mu);
  EXPECT_EQ(r.changed[held], 1u);
}

// A log that forgets what it acknowledged and gives the same sequences to
// new entries (what a power failure of every NATS server can do): the
// replica that applied the old entries finds the fork at its position,
// publishes them again, then copies of what came after, rewinds and
// applies the log again; a router's board counts it for the new entry only
// once it applied it (entries are acknowledged by sequence AND message id).
TEST_F(ShardReplicaTest, ALogThatForgotItsTailIsRepairedFromTheReplica) {
  auto a = Local("docs_s0_a");
  ASSERT_NE(a, nullptr);
  server::router::AckBoard board;
  ShardReplicaOptions o = QuickOptions("a_docs_0");
  o.verify_every = absl::Milliseconds(50);
  o.on_durable = [&board](uint64_t durable, const std::vector<AppliedEntry>& applied) {
    ReplicaAck ack;
    ack.node = "a";
    ack.uid = 7;
    ack.shard = 0;
    ack.durable = durable;
    ack.applied = applied;
    board.Record(ack);
  };
  ASSERT_OK_AND_ASSIGN(auto ra, ShardReplica::Start(js_.get(), a, o));
  uint64_t last = 0;
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK_AND_ASSIGN(PubAck p, js_->Publish(kShard0, EncodeLogEntry(Upsert(i, 1, 0.0f)),
                                                absl::StrCat("old", i)));
    ApplyToModel(Upsert(i, 1, 0.0f));
    last = p.sequence;
  }
  const absl::Time soon = absl::Now() + absl::Seconds(60);
  ASSERT_THAT(board.Await(7, 0, last, "old2", {"a"}, 1, soon), ::testing::ElementsAre("a"));
  // The log forgets: its sequences start again below the replica's
  // position, given to writes that came after (one overwrites point 1).
  // (The replica is stopped meanwhile, so that the new writes are in the
  // log before it looks: a replica that looks first repairs an empty log,
  // and they come after; the end is the same.)
  ra.reset();
  ASSERT_OK(js_->DeleteStream(kStream));
  ASSERT_OK(js_->EnsureStream({kStream, {kShard0, kShard1}}));
  ASSERT_OK_AND_ASSIGN(PubAck fresh,
                       js_->Publish(kShard0, EncodeLogEntry(Upsert(50, 1, 0.0f)), "new0"));
  ASSERT_OK(js_->Publish(kShard0, EncodeLogEntry(Upsert(1, 1, 0.5f)), "new1").status());
  ApplyToModel(Upsert(50, 1, 0.0f));
  ApplyToModel(Upsert(1, 1, 0.5f));
  ASSERT_LE(fresh.sequence, last);
  ASSERT_OK_AND_ASSIGN(ra, ShardReplica::Start(js_.get(), a, o));
  // Repaired: acknowledged once applied for real, and the replica holds
  // the old entries and the new ones, the new one last.
  EXPECT_THAT(board.Await(7, 0, fresh.sequence, "new0", {"a"}, 1,
                          absl::Now() + absl::Seconds(60)),
              ::testing::ElementsAre("a"));
  ASSERT_OK_AND_ASSIGN(uint64_t end, js_->LastSequence(kStream, kShard0));
  ASSERT_TRUE(Applied(ra.get(), end)) << ra->status().last_error;
  EXPECT_EQ(Dump(*a), model_);
  EXPECT_GE(ra->status().forks, 1u);
  EXPECT_EQ(ra->status().repairs, 1u);
  EXPECT_EQ(ra->status().republished, 3u);
  EXPECT_THAT(ra->status().last_fork, HasSubstr("repaired"));
  // A replica started afresh from the repaired log ends the same.
  auto b = Local("docs_s0_b");
  ASSERT_NE(b, nullptr);
  ASSERT_OK_AND_ASSIGN(auto rb, ShardReplica::Start(js_.get(), b, QuickOptions("b_docs_0")));
  ASSERT_TRUE(Applied(rb.get(), end)) << rb->status().last_error;
  EXPECT_EQ(Dump(*b), model_);
}

// A log that lost its tail past a floor the lost history had raised (a
// power failure of every NATS server after the log was trimmed): the
// entries below the floor count as purged only below the log's new end, so
// the fork point is never past it. The replica does not skip the new
// writes that reuse the sequences, publishes its lost entries again, and
// lowers the floor to the fork point + 1 (else every replica rewound there
// would stop as purged past; found by tests/cluster/fault_runner.py's
// power_nats).
TEST_F(ShardReplicaTest, ALogThatLostItsTailPastTheFloorIsRepairedAndTheFloorLowered) {
  auto a = Local("docs_s0_a");
  ASSERT_NE(a, nullptr);
  absl::Mutex mu;
  uint64_t floor = 1;
  ShardReplicaOptions o = QuickOptions("a_docs_0");
  o.verify_every = absl::Milliseconds(50);
  o.floor_check = absl::ZeroDuration();
  o.retain_bytes = 1;  // only the newest entry retained: covered from the one before
  o.log_floor = [&]() -> absl::StatusOr<uint64_t> {
    absl::MutexLock l(&mu);
    return floor;
  };
  o.lower_floor = [&](uint64_t f) {
    absl::MutexLock l(&mu);
    floor = std::min(floor, f);
    return absl::OkStatus();
  };
  ASSERT_OK_AND_ASSIGN(auto ra, ShardReplica::Start(js_.get(), a, o));
  std::vector<uint64_t> seqs;
  for (int i = 0; i < 5; ++i) {
    ASSERT_OK_AND_ASSIGN(PubAck p, js_->Publish(kShard0, EncodeLogEntry(Upsert(i, 1, 0.0f)),
                                                absl::StrCat("old", i)));
    ApplyToModel(Upsert(i, 1, 0.0f));
    seqs.push_back(p.sequence);
  }
  ASSERT_TRUE(Applied(ra.get(), seqs.back())) << ra->status().last_error;
  ra.reset();
  {
    absl::MutexLock l(&mu);
    floor = seqs[4];  // trimmed: the entries below old4 may be gone
  }
  // The log lost everything; the replica finds it empty and repairs it
  // (its entry above the floor published again) before any new write
  // comes: the new ones take the sequences after it, below the replica's
  // old position, where it retains nothing to tell them apart.
  ASSERT_OK(js_->DeleteStream(kStream));
  ASSERT_OK(js_->EnsureStream({kStream, {kShard0, kShard1}}));
  ASSERT_OK_AND_ASSIGN(ra, ShardReplica::Start(js_.get(), a, o));
  absl::Time until = absl::Now() + absl::Seconds(60);
  while (ra->status().repairs < 1 && absl::Now() < until) absl::SleepFor(absl::Milliseconds(10));
  ASSERT_GE(ra->status().repairs, 1u) << ra->status().last_error;
  ASSERT_OK_AND_ASSIGN(PubAck fresh,
                       js_->Publish(kShard0, EncodeLogEntry(Upsert(50, 1, 0.0f)), "new0"));
  ASSERT_OK(js_->Publish(kShard0, EncodeLogEntry(Upsert(1, 1, 0.5f)), "new1").status());
  ApplyToModel(Upsert(50, 1, 0.0f));
  ApplyToModel(Upsert(1, 1, 0.5f));
  ASSERT_LT(fresh.sequence, seqs[4]);  // a sequence below the old floor, given again
  until = absl::Now() + absl::Seconds(60);
  bool done = false;
  while (!done && absl::Now() < until) {
    absl::StatusOr<uint64_t> end = js_->LastSequence(kStream, kShard0);
    done = end.ok() && ra->status().applied >= *end && Dump(*a) == model_;
    if (!done) absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(Dump(*a), model_) << ra->status().last_error;
  EXPECT_FALSE(ra->status().behind_floor);
  absl::MutexLock l(&mu);
  EXPECT_LE(floor, fresh.sequence);
}

// A fork the replica first meets inside a batch (the new writes already
// run past its position): the batch is applied beside the check, never
// reported, and undone by the repair's rewind; the replica ends equal to
// the model, the writes after the failure last.
TEST_F(ShardReplicaTest, ABatchAppliedAcrossAForkIsUndoneByTheRepair) {
  auto a = Local("docs_s0_a");
  ASSERT_NE(a, nullptr);
  ShardReplicaOptions o = QuickOptions("a_docs_0");
  o.verify_every = absl::Hours(1);  // only the batches' checks
  std::vector<uint64_t> reported;
  absl::Mutex mu;
  o.on_durable = [&](uint64_t, const std::vector<AppliedEntry>& applied) {
    absl::MutexLock l(&mu);
    for (const AppliedEntry& e : applied) reported.push_back(e.sequence);
  };
  uint64_t last = 0;
  {
    ASSERT_OK_AND_ASSIGN(auto ra, ShardReplica::Start(js_.get(), a, o));
    for (int i = 0; i < 3; ++i) {
      ASSERT_OK_AND_ASSIGN(PubAck p, js_->Publish(kShard0, EncodeLogEntry(Upsert(i, 1, 0.0f)),
                                                  absl::StrCat("old", i)));
      ApplyToModel(Upsert(i, 1, 0.0f));
      last = p.sequence;
    }
    ASSERT_TRUE(Applied(ra.get(), last));
  }
  ASSERT_OK(js_->DeleteStream(kStream));
  ASSERT_OK(js_->EnsureStream({kStream, {kShard0, kShard1}}));
  for (int i = 0; i < 5; ++i) {
    ASSERT_OK(js_->Publish(kShard0, EncodeLogEntry(Upsert(i, 1, 0.5f)), absl::StrCat("new", i))
                  .status());
    ApplyToModel(Upsert(i, 1, 0.5f));
  }
  {
    absl::MutexLock l(&mu);
    reported.clear();
  }
  ASSERT_OK_AND_ASSIGN(auto ra, ShardReplica::Start(js_.get(), a, o));
  const absl::Time end = absl::Now() + absl::Seconds(60);
  while (ra->status().repairs == 0 && absl::Now() < end) absl::SleepFor(absl::Milliseconds(10));
  ASSERT_EQ(ra->status().repairs, 1u) << ra->status().last_error;
  ASSERT_OK_AND_ASSIGN(uint64_t head, js_->LastSequence(kStream, kShard0));
  ASSERT_TRUE(Applied(ra.get(), head)) << ra->status().last_error;
  EXPECT_EQ(Dump(*a), model_);
  // What the batch across the fork held (sequences 4 and 5) was reported
  // only after the rewind applied it again, in order from sequence 1 (the
  // report follows the apply: awaited).
  absl::MutexLock l(&mu);
  auto head_reported = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu) {
    return std::find(reported.begin(), reported.end(), head) != reported.end();
  };
  mu.AwaitWithTimeout(absl::Condition(&head_reported), absl::Seconds(60));
  ASSERT_TRUE(head_reported());
  EXPECT_EQ(reported.front(), 1u);
}

// A tail lost after a prefix survived, two replicas at different
// positions on the old branch: the one further ahead republishes what it
// has; the one behind finds its entries already back and only rewinds.
// Both end equal to the model, the write that came after the failure
// winning over the older one to the same point.
TEST_F(ShardReplicaTest, ReplicasAtDifferentPositionsOnALostTailConverge) {
  auto a = Local("docs_s0_a");
  auto b = Local("docs_s0_b");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ShardReplicaOptions oa = QuickOptions("a_docs_0");
  ShardReplicaOptions ob = QuickOptions("b_docs_0");
  oa.verify_every = ob.verify_every = absl::Milliseconds(50);
  std::vector<std::string> bytes;
  for (int i = 0; i < 5; ++i) bytes.push_back(EncodeLogEntry(Upsert(i, 1, 0.0f)));
  uint64_t seq[5];
  for (int i = 0; i < 5; ++i) {
    ASSERT_OK_AND_ASSIGN(PubAck p, js_->Publish(kShard0, bytes[i], absl::StrCat("old", i)));
    seq[i] = p.sequence;
    ApplyToModel(Upsert(i, 1, 0.0f));
  }
  {
    ASSERT_OK_AND_ASSIGN(auto ra, ShardReplica::Start(js_.get(), a, oa));
    ASSERT_TRUE(Applied(ra.get(), seq[4]));
  }
  {
    // b stops after old2 (its consumer set to end there).
    ASSERT_OK_AND_ASSIGN(auto rb, ShardReplica::Start(js_.get(), b, ob));
    ASSERT_TRUE(Applied(rb.get(), seq[4]));
  }
  ASSERT_OK(b->SetLogPosition(seq[2]));  // as if it had stopped there
  // The power failure: the log keeps old0 and old1 only, and a write
  // after it takes the next sequence (overwriting point 3, adding 60).
  ASSERT_OK(js_->DeleteStream(kStream));
  ASSERT_OK(js_->EnsureStream({kStream, {kShard0, kShard1}}));
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK_AND_ASSIGN(PubAck p, js_->Publish(kShard0, bytes[i], absl::StrCat("old", i)));
    ASSERT_EQ(p.sequence, seq[i]);
  }
  LogEntry x = Upsert(3, 1, 0.75f);
  x.points.push_back(Upsert(60, 1, 0.0f).points[0]);
  ASSERT_OK(js_->Publish(kShard0, EncodeLogEntry(x), "x").status());
  ApplyToModel(x);
  ASSERT_OK_AND_ASSIGN(auto ra, ShardReplica::Start(js_.get(), a, oa));
  const absl::Time end = absl::Now() + absl::Seconds(60);
  while (ra->status().repairs == 0 && absl::Now() < end) absl::SleepFor(absl::Milliseconds(10));
  ASSERT_EQ(ra->status().repairs, 1u) << ra->status().last_error;
  EXPECT_EQ(ra->status().republished, 3u);  // old2, old3, old4 (b's old2 was lost with them)
  ASSERT_OK_AND_ASSIGN(auto rb, ShardReplica::Start(js_.get(), b, ob));
  while (rb->status().repairs == 0 && absl::Now() < end) absl::SleepFor(absl::Milliseconds(10));
  ASSERT_EQ(rb->status().repairs, 1u) << rb->status().last_error;
  EXPECT_EQ(rb->status().republished, 0u);  // old2 was back: rewound only
  ASSERT_OK_AND_ASSIGN(uint64_t last, js_->LastSequence(kStream, kShard0));
  EXPECT_EQ(last, seq[1] + 1 + 3);  // x, the three copies (at their versions: x is not copied)
  ASSERT_TRUE(Applied(ra.get(), last)) << ra->status().last_error;
  ASSERT_TRUE(Applied(rb.get(), last)) << rb->status().last_error;
  EXPECT_EQ(Dump(*a), model_);
  EXPECT_EQ(Dump(*b), model_);
  EXPECT_EQ(model_[3].second, "p3/0.75");
}

// Write versions (versioned_apply.h): replicas derive the same version for
// each entry from the log, and an entry published again with an older
// version (a repair's copy, applied after newer writes) changes nothing
// they wrote, on any replica.
TEST_F(ShardReplicaTest, AnOldEntryPublishedAgainChangesNothingANewerOneWrote) {
  auto a = Local("docs_s0_a");
  auto b = Local("docs_s0_b");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ShardReplica* ra = StartReplica("a", a);
  ShardReplica* rb = StartReplica("b", b);
  ASSERT_NE(ra, nullptr);
  ASSERT_NE(rb, nullptr);
  const uint64_t first = Publish(Upsert(3, 2, 0.0f));
  ASSERT_TRUE(Applied(ra, first));
  ASSERT_OK_AND_ASSIGN(std::vector<uint64_t> old_version, WriteVersionsOf(*a, {3}));
  ASSERT_GT(old_version[0], 0u);
  const uint64_t second = Publish(Upsert(3, 1, 0.5f));
  const uint64_t gone = Publish(Delete({4}));
  ASSERT_TRUE(Applied(ra, gone));
  ASSERT_TRUE(Applied(rb, gone));
  ASSERT_OK_AND_ASSIGN(std::vector<uint64_t> va, WriteVersionsOf(*a, {3, 4}));
  ASSERT_OK_AND_ASSIGN(std::vector<uint64_t> vb, WriteVersionsOf(*b, {3, 4}));
  EXPECT_EQ(va, vb);
  EXPECT_GT(va[0], old_version[0]);
  EXPECT_GT(va[1], va[0]);
  EXPECT_EQ(a->log_version(), b->log_version());
  EXPECT_EQ(a->log_version(), va[1]);
  (void)second;
  // The first upsert again, at its version: 3 keeps 0.5, 4 stays deleted.
  LogEntry copy = Upsert(3, 2, 0.0f);
  copy.version = old_version[0];
  ASSERT_OK_AND_ASSIGN(PubAck p, js_->Publish(kShard0, EncodeLogEntry(copy), "copy"));
  ASSERT_TRUE(Applied(ra, p.sequence));
  ASSERT_TRUE(Applied(rb, p.sequence));
  EXPECT_EQ(Dump(*a), model_);
  EXPECT_EQ(Dump(*b), model_);
  EXPECT_EQ(model_[3].second, "p3/0.5");
  EXPECT_FALSE(model_.contains(4));
  // The log version does not go back with an old copy.
  EXPECT_EQ(a->log_version(), va[1]);
}

// A replica restored from a snapshot retains nothing before its position;
// when the whole stream is lost after that (a power failure of every NATS
// server before it synced anything), the log no longer reaches its
// position: it publishes its whole state at its write versions and
// applies the log from its start, and a replica that retains its entries
// repairs as before. Both end with every write, the new one included.
TEST_F(ShardReplicaTest, ARestoredReplicaWhoseLogWasLostPublishesItsWholeState) {
  auto a = Local("docs_s0_a");
  ASSERT_NE(a, nullptr);
  ShardReplicaOptions oa = QuickOptions("a_docs_0");
  ShardReplicaOptions oc = QuickOptions("c_docs_0");
  oa.verify_every = oc.verify_every = absl::Milliseconds(50);
  uint64_t last = 0;
  {
    ASSERT_OK_AND_ASSIGN(auto ra, ShardReplica::Start(js_.get(), a, oa));
    Publish(Upsert(1, 3, 0.0f));
    Publish(Delete({2}));
    last = Publish(Upsert(10, 2, 0.25f));
    ASSERT_TRUE(Applied(ra.get(), last)) << ra->status().last_error;
  }
  ASSERT_OK_AND_ASSIGN(server::SnapshotInfo snap, db_->CreateSnapshot("docs_s0_a"));
  ASSERT_OK_AND_ASSIGN(auto file, db_->SnapshotFile("docs_s0_a", snap.name));
  ASSERT_OK_AND_ASSIGN(auto c, db_->RestoreSnapshot(file.first, "docs_s0_c", false));
  ASSERT_EQ(c->log_position(), last);
  // Every entry lost; a write after the failure takes sequence 1.
  ASSERT_OK(js_->DeleteStream(kStream));
  ASSERT_OK(js_->EnsureStream({kStream, {kShard0, kShard1}}));
  LogEntry x = Upsert(3, 1, 0.75f);
  x.points.push_back(Upsert(60, 1, 0.0f).points[0]);
  ASSERT_OK(js_->Publish(kShard0, EncodeLogEntry(x), "x").status());
  ApplyToModel(x);
  ASSERT_OK_AND_ASSIGN(auto rc, ShardReplica::Start(js_.get(), c, oc));
  const absl::Time end = absl::Now() + absl::Seconds(60);
  while (rc->status().repairs == 0 && absl::Now() < end) absl::SleepFor(absl::Milliseconds(10));
  ASSERT_EQ(rc->status().repairs, 1u) << rc->status().last_error;
  EXPECT_FALSE(rc->status().needs_restore);
  EXPECT_THAT(rc->status().last_fork, HasSubstr("whole state"));
  ASSERT_OK_AND_ASSIGN(auto ra, ShardReplica::Start(js_.get(), a, oa));
  while (ra->status().repairs == 0 && absl::Now() < end) absl::SleepFor(absl::Milliseconds(10));
  ASSERT_EQ(ra->status().repairs, 1u) << ra->status().last_error;
  ASSERT_OK_AND_ASSIGN(uint64_t now_last, js_->LastSequence(kStream, kShard0));
  ASSERT_TRUE(Applied(ra.get(), now_last)) << ra->status().last_error;
  ASSERT_TRUE(Applied(rc.get(), now_last)) << rc->status().last_error;
  EXPECT_EQ(Dump(*a), model_);
  EXPECT_EQ(Dump(*c), model_);
  EXPECT_EQ(model_[3].second, "p3/0.75");
  EXPECT_FALSE(model_.contains(2));
}

// NATS lost the stream itself, and nothing made it again: a replica that
// cannot make its consumer (NotFound) makes the stream again, finds its
// log ending before its position, and publishes again what it applied
// (the fault runner found one retrying the consumer for minutes instead).
TEST_F(ShardReplicaTest, AStreamNatsLostIsMadeAgainAndTheReplicaRepairsIt) {
  auto a = Local("docs_s0_a");
  ASSERT_NE(a, nullptr);
  ShardReplicaOptions o = QuickOptions("a_docs_0");
  o.verify_every = absl::Milliseconds(50);
  std::atomic<int> made{0};
  o.ensure_stream = [&]() -> absl::Status {
    ++made;
    return js_->EnsureStream({kStream, {kShard0, kShard1}});
  };
  uint64_t last = 0;
  {
    ASSERT_OK_AND_ASSIGN(auto ra, ShardReplica::Start(js_.get(), a, o));
    Publish(Upsert(1, 3, 0.0f));
    Publish(Delete({2}));
    last = Publish(Upsert(10, 2, 0.25f));
    ASSERT_TRUE(Applied(ra.get(), last)) << ra->status().last_error;
  }
  ASSERT_OK(js_->DeleteStream(kStream));
  ASSERT_OK_AND_ASSIGN(auto ra, ShardReplica::Start(js_.get(), a, o));
  const absl::Time end = absl::Now() + absl::Seconds(60);
  while (ra->status().repairs == 0 && absl::Now() < end) absl::SleepFor(absl::Milliseconds(10));
  ASSERT_EQ(ra->status().repairs, 1u) << ra->status().last_error;
  EXPECT_GE(made.load(), 1);
  EXPECT_GT(ra->status().republished, 0u);
  ASSERT_OK_AND_ASSIGN(uint64_t now_last, js_->LastSequence(kStream, kShard0));
  EXPECT_GT(now_last, 0u);  // its state is in the log again
  ASSERT_TRUE(Applied(ra.get(), now_last)) << ra->status().last_error;
  EXPECT_EQ(Dump(*a), model_);
  // A replica started from nothing takes it all from the log.
  auto b = Local("docs_s0_b");
  ASSERT_OK_AND_ASSIGN(auto rb, ShardReplica::Start(js_.get(), b, QuickOptions("b_docs_0")));
  ASSERT_TRUE(Applied(rb.get(), now_last)) << rb->status().last_error;
  EXPECT_EQ(Dump(*b), model_);
}

// A lost field index change is not versioned: its repair puts the order
// back (the replica's lost entries, then copies of the writes that came
// after), as before write versions.
TEST_F(ShardReplicaTest, ALostFieldIndexChangeIsRepairedInOrder) {
  auto a = Local("docs_s0_a");
  ASSERT_NE(a, nullptr);
  ShardReplicaOptions o = QuickOptions("a_docs_0");
  o.verify_every = absl::Milliseconds(50);
  LogEntry index;
  index.op = LogOp::kCreateFieldIndex;
  index.field = "tag";
  {
    ASSERT_OK_AND_ASSIGN(auto ra, ShardReplica::Start(js_.get(), a, o));
    ASSERT_OK(js_->Publish(kShard0, EncodeLogEntry(Upsert(1, 2, 0.0f)), "old0").status());
    ApplyToModel(Upsert(1, 2, 0.0f));
    ASSERT_OK_AND_ASSIGN(PubAck p, js_->Publish(kShard0, EncodeLogEntry(index), "old1"));
    ASSERT_TRUE(Applied(ra.get(), p.sequence)) << ra->status().last_error;
  }
  ASSERT_OK(js_->DeleteStream(kStream));
  ASSERT_OK(js_->EnsureStream({kStream, {kShard0, kShard1}}));
  ASSERT_OK(js_->Publish(kShard0, EncodeLogEntry(Upsert(1, 1, 0.5f)), "new0").status());
  ApplyToModel(Upsert(1, 1, 0.5f));
  ASSERT_OK_AND_ASSIGN(auto ra, ShardReplica::Start(js_.get(), a, o));
  const absl::Time end = absl::Now() + absl::Seconds(60);
  while (ra->status().repairs == 0 && absl::Now() < end) absl::SleepFor(absl::Milliseconds(10));
  ASSERT_EQ(ra->status().repairs, 1u) << ra->status().last_error;
  EXPECT_EQ(ra->status().republished, 2u);
  EXPECT_THAT(ra->status().last_fork, HasSubstr("1 later ones copied"));
  ASSERT_OK_AND_ASSIGN(uint64_t last, js_->LastSequence(kStream, kShard0));
  ASSERT_TRUE(Applied(ra.get(), last)) << ra->status().last_error;
  EXPECT_EQ(Dump(*a), model_);
}

// A consumer that delivers nothing while the log is ahead (here: replaced
// from outside by one that starts far past the log) is made again from the
// replica's position, and the replica catches up.
TEST_F(ShardReplicaTest, AConsumerThatDeliversNothingIsMadeAgain) {
  auto a = Local("docs_s0_a");
  ASSERT_NE(a, nullptr);
  ShardReplicaOptions o = QuickOptions("a_docs_0");
  o.floor_check = absl::Milliseconds(200);
  ASSERT_OK_AND_ASSIGN(auto ra, ShardReplica::Start(js_.get(), a, o));
  ASSERT_TRUE(Applied(ra.get(), Publish(Upsert(0, 5, 0.0f))));
  ASSERT_OK_AND_ASSIGN(auto elsewhere, js_->Consume(kStream, kShard0, "a_docs_0", 1000000));
  const uint64_t last = Publish(Upsert(10, 5, 0.0f));
  ASSERT_TRUE(Applied(ra.get(), last)) << ra->status().last_error;
  EXPECT_EQ(Dump(*a), model_);
}

TEST_F(ShardReplicaTest, AReplicaTheLogWasPurgedPastStopsInsteadOfSkippingTheGap) {
  LogEntry e;
  e.op = LogOp::kUpsert;
  e.dim = kDim;
  e.points.push_back({1, {1, 2, 3, 4}, "a", {}});
  const uint64_t seq = Publish(e);
  ShardReplicaOptions o;
  o.stream = kStream;
  o.subject = kShard0;
  o.durable = "n0_docs_0";
  uint64_t floor = 1;
  absl::Mutex mu;
  o.log_floor = [&]() -> absl::StatusOr<uint64_t> {
    absl::MutexLock l(&mu);
    return floor;
  };
  o.floor_check = absl::ZeroDuration();
  std::shared_ptr<Collection> c = Local("n0_docs_0");
  ASSERT_OK_AND_ASSIGN(auto r, ShardReplica::Start(js_.get(), c, o));
  ASSERT_TRUE(r->WaitApplied(seq, absl::Now() + absl::Seconds(30)));
  {
    absl::MutexLock l(&mu);
    floor = seq + 5;  // purged past: entries after `seq` may be gone
  }
  e.points[0].id = 2;
  Publish(e);
  const absl::Time end = absl::Now() + absl::Seconds(30);
  while (!r->status().failed && absl::Now() < end) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_TRUE(r->status().failed);
  EXPECT_TRUE(r->status().behind_floor);
  EXPECT_THAT(r->status().last_error, HasSubstr("purged"));
  EXPECT_EQ(c->log_position(), seq);  // nothing applied past the gap
}

// A replica catching up reads the floor before every batch: a trim that
// purges under it meanwhile (as one did under a replica that had just
// rewound, its record still showing its old position) stops it, instead
// of the consumer skipping the purged entries and the replica applying
// past the gap (found by the fault runner: a replica lacked a write).
TEST_F(ShardReplicaTest, APurgeUnderAReplicaCatchingUpStopsIt) {
  uint64_t last = 0;
  for (int i = 0; i < 60; ++i) last = Publish(Upsert(i, 1, 0.0f));
  ShardReplicaOptions o = QuickOptions("n0_docs_0");
  o.fetch_batch = 1;
  o.floor_check = absl::Hours(1);  // only the catching-up rule reads it
  absl::Mutex mu;
  uint64_t floor = 1;
  int reads = 0;
  const uint64_t purge_at = last - 10;
  o.log_floor = [&]() -> absl::StatusOr<uint64_t> {
    absl::MutexLock l(&mu);
    if (++reads == 10) {
      // Another node's trim, from a stale record: floor raised, log purged.
      floor = purge_at;
      EXPECT_OK(js_->PurgeBefore(kStream, kShard0, purge_at));
    }
    return floor;
  };
  std::shared_ptr<Collection> c = Local("n0_docs_0");
  ASSERT_OK_AND_ASSIGN(auto r, ShardReplica::Start(js_.get(), c, o));
  const absl::Time end = absl::Now() + absl::Seconds(30);
  while (!r->status().failed && absl::Now() < end) absl::SleepFor(absl::Milliseconds(10));
  ASSERT_TRUE(r->status().failed) << "applied through " << r->status().applied;
  EXPECT_TRUE(r->status().behind_floor);
  EXPECT_LT(r->status().applied, purge_at);
}

TEST_F(ShardReplicaTest, ANatsRestartIsWaitedOut) {
  auto a = Local("docs_s0_a");
  ASSERT_NE(a, nullptr);
  ShardReplica* ra = StartReplica("a", a);
  ASSERT_NE(ra, nullptr);
  uint64_t last = Publish(Upsert(0, 10, 0.0f));
  ASSERT_TRUE(Applied(ra, last));
  nats_->Signal(SIGKILL);
  // The replica keeps trying (its status says why) and resumes after the
  // server is back: the stream was on disk.
  ASSERT_TRUE(nats_->Start()) << nats_->Log();
  const absl::Time end = absl::Now() + absl::Seconds(60);
  absl::StatusOr<PubAck> ack;
  do {
    ack = js_->Publish(kShard0, EncodeLogEntry(Upsert(10, 5, 0.0f)));
    if (!ack.ok()) absl::SleepFor(absl::Milliseconds(100));
  } while (!ack.ok() && absl::Now() < end);
  ASSERT_OK(ack.status());
  ApplyToModel(Upsert(10, 5, 0.0f));
  ASSERT_TRUE(Applied(ra, ack->sequence)) << ra->status().last_error;
  EXPECT_EQ(Dump(*a), model_);
}

}  // namespace
}  // namespace zoom::cluster
