// File: server/api/local_backend.h
//
// LocalBackend: the CollectionBackend of this process's Database (a
// standalone zoomd). NodeBackend: a cluster node's, the same collections
// as shard replicas: the clients' writes and collection admin are refused
// (FailedPrecondition naming the router to use: the replicas are written
// through their logs), and a search or build that names write tokens waits
// until they are applied.
//
// Thread safety: as the Database; the backend holds no mutable state.
#ifndef ZOOM_SERVER_API_LOCAL_BACKEND_H_
#define ZOOM_SERVER_API_LOCAL_BACKEND_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "server/api/backend.h"
#include "server/api/convert.h"
#include "server/engine/database.h"

namespace zoom::server::api {

class LocalBackend : public CollectionBackend {
 public:
  // `db` outlives the backend.
  LocalBackend(Database* db, const ServiceLimits& limits) : db_(db), limits_(limits) {}

  bool SearchesHere() const override { return true; }
  bool AnswersInRam(const std::string& collection) const override;

  absl::StatusOr<CollectionDescription> CreateCollection(
      const Call& call, const CreateCollectionRequest& req) override;
  absl::Status DropCollection(const Call& call, const std::string& name) override;
  absl::StatusOr<std::vector<CollectionDescription>> ListCollections(const Call& call) override;
  absl::StatusOr<CollectionDescription> GetCollection(const Call& call,
                                                      const std::string& name) override;

  absl::StatusOr<WriteAnswer> Upsert(const Call& call, const UpsertRequest& req) override;
  absl::StatusOr<WriteAnswer> Delete(const Call& call, const DeleteRequest& req) override;
  absl::StatusOr<std::vector<PointData>> Get(const Call& call, const GetRequest& req) override;
  absl::StatusOr<WriteAnswer> SetPayload(const Call& call, const SetPayloadRequest& req) override;
  absl::StatusOr<WriteAnswer> DeletePayload(const Call& call,
                                            const DeletePayloadRequest& req) override;

  absl::StatusOr<SearchAnswer> Search(const Call& call, const SearchRequest& req) override;
  absl::StatusOr<std::vector<SearchAnswer>> SearchBatch(const Call& call,
                                                        const SearchBatchRequest& req) override;
  absl::StatusOr<CountAnswer> Count(const Call& call, const CountRequest& req) override;
  absl::StatusOr<ScrollAnswer> Scroll(const Call& call, const ScrollRequest& req) override;

  absl::StatusOr<CollectionDescription> CreateFieldIndex(
      const Call& call, const CreateFieldIndexRequest& req) override;
  absl::StatusOr<CollectionDescription> DeleteFieldIndex(
      const Call& call, const DeleteFieldIndexRequest& req) override;
  void BuildIndex(const Call& call, const BuildIndexRequest& req,
                  std::function<void(absl::StatusOr<CollectionDescription>)> done) override;
  absl::StatusOr<CollectionDescription> Compact(const Call& call,
                                                const std::string& collection) override;

  absl::StatusOr<SnapshotInfo> CreateSnapshot(const Call& call,
                                              const std::string& collection) override;
  absl::StatusOr<std::vector<SnapshotInfo>> ListSnapshots(const Call& call,
                                                          const std::string& collection) override;
  absl::Status DeleteSnapshot(const Call& call, const std::string& collection,
                              const std::string& name) override;
  absl::StatusOr<std::unique_ptr<SnapshotReader>> OpenSnapshot(const Call& call,
                                                               const std::string& collection,
                                                               const std::string& name) override;
  absl::StatusOr<std::unique_ptr<SnapshotRestore>> BeginRestore(
      const Call& call, const std::string& collection, bool overwrite,
      const std::string& source) override;

  Database* db() const { return db_; }
  const ServiceLimits& limits() const { return limits_; }

 protected:
  // Hooks of a node: before a search that names write tokens, and before a
  // build that does (`after`). OK by default.
  virtual absl::Status BeforeSearch(const Call& call, const std::string& collection,
                                    const Query& query) const {
    (void)call, (void)collection, (void)query;
    return absl::OkStatus();
  }
  virtual absl::Status BeforeBuild(const Call& call, const BuildIndexRequest& req) const {
    (void)call, (void)req;
    return absl::OkStatus();
  }

 private:
  // One query of `c`; its payload and vector bytes are taken from *budget
  // (ResourceExhausted past it).
  absl::StatusOr<SearchAnswer> SearchOne(const Call& call, const Collection& c,
                                         const Query& q, uint64_t* budget) const;
  // The collection's params of one query (the budget is set by the caller).
  CollectionSearchParams ParamsOf(const Call& call, const Query& q) const;
  // The answer of a query run (its warning, degraded flag, bytes taken).
  SearchAnswer AnswerOf(const Collection& c, const Query& q, QueryResult result,
                        uint64_t* budget) const;
  // A write's answer: `count` and the concern a standalone meets.
  WriteAnswer Answer(uint64_t count, WriteConcern asked) const;

  Database* db_;
  ServiceLimits limits_;
};

struct NodeOptions {
  std::string cluster, node;
  // Session consistency: OK once local collection `collection` (a shard
  // replica's local name) has applied its shard's token among `tokens`,
  // Unavailable saying how far it is when not by `deadline`.
  std::function<absl::Status(const std::string& collection,
                             const std::vector<WriteToken>& tokens, absl::Time deadline)>
      wait_applied;
  // How long a SESSION search waits for its tokens (then UNAVAILABLE: the
  // router asks another replica).
  absl::Duration max_session_wait = absl::Seconds(1);
};

class NodeBackend final : public LocalBackend {
 public:
  NodeBackend(Database* db, const ServiceLimits& limits, NodeOptions options)
      : LocalBackend(db, limits), options_(std::move(options)) {}

  absl::Status AcceptsWrites(absl::string_view rpc) const override;

 protected:
  absl::Status BeforeSearch(const Call& call, const std::string& collection,
                            const Query& query) const override;
  absl::Status BeforeBuild(const Call& call, const BuildIndexRequest& req) const override;

 private:
  NodeOptions options_;
};

}  // namespace zoom::server::api

#endif  // ZOOM_SERVER_API_LOCAL_BACKEND_H_
