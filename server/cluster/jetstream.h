// File: server/cluster/jetstream.h
//
// JetStream: the cluster's connection to NATS JetStream, the one file that
// calls the NATS C client (libnats). What a zoomd cluster needs of it and no
// more:
//
//   * streams: the write log of a clustered collection (one stream, one
//     subject per shard); Publish returns once JetStream acknowledged the
//     message (stored by a quorum of the stream's replicas) with its stream
//     sequence;
//   * pull consumers: a replica reads its shard's subject in order from a
//     sequence (FetchBatch), acknowledging what it applied;
//   * key-value buckets: the shard map (compare-and-set on revision) and
//     the node bucket (entries expire after the bucket's max age);
//   * notices: core NATS publish and subscribe, no stream (a message may be
//     lost: what is sent this way is sent again), for the replicas'
//     reports of their durable positions.
//
// Errors: every NATS status becomes an absl::Status with the server's
// words and what was asked: a timeout or a lost connection is Unavailable
// (the caller may retry: the log may be without quorum), a missing stream,
// consumer, bucket or key NotFound, a failed compare-and-set Aborted
// ("revision moved"), a bad name InvalidArgument.
//
// Names: stream, consumer and bucket names are [A-Za-z0-9_-]; subjects are
// dot-separated tokens of [A-Za-z0-9_-] (ValidName / ValidSubject). NATS
// would take more; the cluster never needs it, and a collection name is
// mapped onto these (cluster_names.h).
//
// Thread safety: JetStream and KeyValue are safe from many threads (NATS's
// connection is). A PullConsumer is used by one thread at a time.
#ifndef ZOOM_SERVER_CLUSTER_JETSTREAM_H_
#define ZOOM_SERVER_CLUSTER_JETSTREAM_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace zoom::cluster {

struct JetStreamOptions {
  // nats://host:port URLs; the client moves between them on failure.
  std::vector<std::string> servers;
  // The connection's name (seen in the servers' monitoring).
  std::string name = "zoomd";
  // How long a JetStream request (publish acknowledgement, stream or
  // consumer admin, a key-value operation) may take before Unavailable.
  absl::Duration request_timeout = absl::Seconds(2);
  // How long creating or changing a stream, consumer or bucket may take (a
  // clustered JetStream forms a Raft group for it: seconds).
  absl::Duration admin_timeout = absl::Seconds(10);
  // How long the first connection may take (every server tried).
  absl::Duration connect_timeout = absl::Seconds(2);
  // Reconnection: forever, this far apart (a reconnecting client's calls
  // fail Unavailable meanwhile).
  absl::Duration reconnect_wait = absl::Milliseconds(250);
};

struct StreamSpec {
  std::string name;
  std::vector<std::string> subjects;
  // JetStream's own replicas of the stream (1..5; 3 on a 3-server cluster).
  int replicas = 1;
  // Publishes with the same message id within this window are stored once
  // (a retried write is not applied twice).
  absl::Duration duplicate_window = absl::Minutes(2);
  // 0: unlimited.
  int64_t max_bytes = 0;
  int32_t max_message_bytes = 0;
};

struct StreamState {
  uint64_t messages = 0;
  uint64_t bytes = 0;
  uint64_t first_sequence = 0;
  uint64_t last_sequence = 0;
  int replicas = 0;
};

struct PubAck {
  uint64_t sequence = 0;
  // The message id was seen within the duplicate window: stored before,
  // at `sequence`.
  bool duplicate = false;
};

// One message read by a consumer.
struct LogMessage {
  std::string subject;
  uint64_t sequence = 0;  // the stream's sequence
  std::string data;
  // The messages after this one the consumer has not been given yet.
  uint64_t pending = 0;
  // The message id its publisher gave it (Publish's message_id; "" if none).
  std::string id;
  // A consumer's message (Fetch): its delivery's number among the
  // consumer's deliveries (1, 2, ...: every delivery, a redelivery too,
  // takes the next one). A number skipped is a delivery that never reached
  // this consumer (a connection lost mid-fetch): the messages after it
  // must not be applied across the gap. 0 elsewhere.
  uint64_t delivery = 0;
  // A consumer's message: when the stream stored it (its leader's clock,
  // ns since the Unix epoch; the same on every server). 0 elsewhere.
  uint64_t timestamp = 0;
};

class JetStream;

// A core NATS subscription (JetStream::Subscribe). Its handler runs on the
// NATS library's delivery thread, one message at a time, in order; once
// the destructor returned it runs no more.
class Subscription {
 public:
  ~Subscription();
  Subscription(const Subscription&) = delete;
  Subscription& operator=(const Subscription&) = delete;

 private:
  friend class JetStream;
  struct Impl;
  explicit Subscription(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A durable pull consumer of one stream, filtered on one subject.
class PullConsumer {
 public:
  ~PullConsumer();
  PullConsumer(const PullConsumer&) = delete;
  PullConsumer& operator=(const PullConsumer&) = delete;

  // Up to `max_messages` messages in stream order, waiting at most `wait`
  // for the first; an empty vector when none came. Messages before the
  // last one acknowledged may come again (after a reconnection): the
  // caller skips sequences it applied.
  absl::StatusOr<std::vector<LogMessage>> Fetch(int max_messages, absl::Duration wait);
  // Acknowledges every message up to `sequence` (the consumer's ack policy
  // is "all").
  absl::Status AckThrough(uint64_t sequence);
  // The consumer's messages not yet delivered, as JetStream counts them.
  absl::StatusOr<uint64_t> Pending() const;
  const std::string& durable() const { return durable_; }

 private:
  friend class JetStream;
  struct Impl;
  PullConsumer(JetStream* js, std::string stream, std::string durable, std::unique_ptr<Impl> impl);
  JetStream* js_;
  std::string stream_, durable_;
  std::unique_ptr<Impl> impl_;
};

struct KvEntry {
  std::string value;
  uint64_t revision = 0;
  bool operator==(const KvEntry&) const = default;
};

struct BucketSpec {
  std::string name;
  // Entries older than this are gone (0: kept). The node bucket's heartbeat
  // horizon.
  absl::Duration max_age = absl::ZeroDuration();
  int replicas = 1;
  int history = 1;
  // Its entries are remade by their writers within seconds (node records,
  // log floors): a bucket whose stream stops answering (its Raft group
  // stuck after its servers lost their files to a power failure: every
  // request times out while JetStream itself answers) may be deleted and
  // made again (EnsureBucket).
  bool soft = false;
};

// A key-value bucket. Keys are ValidSubject tokens joined by '.'.
class KeyValue {
 public:
  ~KeyValue();
  KeyValue(const KeyValue&) = delete;
  KeyValue& operator=(const KeyValue&) = delete;

  // nullopt when the key is absent (never written, deleted or expired).
  absl::StatusOr<std::optional<KvEntry>> Get(std::string_view key) const;
  // Writes `value` whatever is there; returns the new revision.
  absl::StatusOr<uint64_t> Put(std::string_view key, std::string_view value);
  // Writes `value` only if the key is absent: AlreadyExists otherwise.
  absl::StatusOr<uint64_t> Create(std::string_view key, std::string_view value);
  // Writes `value` only if the key's revision is still `revision`: Aborted
  // ("revision moved") otherwise. The compare-and-set of the shard map.
  absl::StatusOr<uint64_t> Update(std::string_view key, std::string_view value,
                                  uint64_t revision);
  absl::Status Delete(std::string_view key);
  // The keys of the bucket's stream, sorted: those present and those
  // deleted but not yet purged (Get says nullopt for these). One request,
  // no consumer.
  absl::StatusOr<std::vector<std::string>> Keys() const;
  const std::string& bucket() const { return bucket_; }

 private:
  friend class JetStream;
  struct Impl;
  KeyValue(std::string bucket, std::unique_ptr<Impl> impl);
  std::string bucket_;
  std::unique_ptr<Impl> impl_;
};

class JetStream {
 public:
  // Connects to the first server that answers. Unavailable when none does
  // within connect_timeout (the URLs named), InvalidArgument for no URL or
  // a malformed one.
  static absl::StatusOr<std::unique_ptr<JetStream>> Connect(const JetStreamOptions& options);
  ~JetStream();
  JetStream(const JetStream&) = delete;
  JetStream& operator=(const JetStream&) = delete;

  // Creates the stream, or checks an existing one has these subjects
  // (FailedPrecondition naming the difference otherwise; its other limits
  // are updated).
  absl::Status EnsureStream(const StreamSpec& spec);
  absl::StatusOr<StreamState> GetStreamState(const std::string& stream) const;
  // The sequence of the last message on `subject` (0: none).
  absl::StatusOr<uint64_t> LastSequence(const std::string& stream, const std::string& subject) const;
  absl::Status DeleteStream(const std::string& stream);
  // Removes the messages of `subject` before `sequence` (the log below
  // every replica's snapshot).
  absl::Status PurgeBefore(const std::string& stream, const std::string& subject,
                           uint64_t sequence);

  // Publishes `data` on `subject` and waits for JetStream's acknowledgement
  // (request_timeout). `message_id` (may be empty) deduplicates retries
  // within the stream's duplicate window. Unavailable when the stream does
  // not answer (no quorum, no server): the message may or may not be
  // stored, and a retry with the same message id is safe.
  // `timeout` > 0 waits at most that long (the caller's deadline), never
  // longer than request_timeout.
  absl::StatusOr<PubAck> Publish(const std::string& subject, std::string_view data,
                                 const std::string& message_id = "",
                                 absl::Duration timeout = absl::ZeroDuration());

  // Publish, but stored only if the last message on `subject` is still
  // `expected_last` (0: none): Aborted ("wrong last sequence") when another
  // came first. How a log repair appends entries no write can come between.
  absl::StatusOr<PubAck> PublishAfter(const std::string& subject, std::string_view data,
                                      const std::string& message_id, uint64_t expected_last);
  // The message at stream sequence `sequence` (its subject, data and
  // message id; pending 0): NotFound when the stream holds none there
  // (never written, purged, deleted, or past the end). Asked of the
  // stream's leader; `direct`: of whichever of its servers answers first
  // (raw bytes, no JSON: cheaper, but a follower may not have the newest
  // messages yet; the stream must allow it: EnsureStream's do).
  absl::StatusOr<LogMessage> GetMessage(const std::string& stream, uint64_t sequence,
                                        bool direct = false) const;

  // Notices (core NATS): `data` to whoever subscribes to `subject` now; no
  // stream stores it, nothing acknowledges it (Unavailable when not
  // connected). Subscribe calls `on_message` with each message's data on
  // `subject` (a wildcard allowed) until the Subscription is destroyed.
  absl::Status PublishNotice(const std::string& subject, std::string_view data);
  absl::StatusOr<std::unique_ptr<Subscription>> Subscribe(
      const std::string& subject, std::function<void(std::string_view)> on_message);

  // The durable pull consumer `durable` of `stream` on `subject`, starting
  // at stream sequence `start_sequence` (>= 1). An existing consumer of that
  // name is replaced: the caller's applied sequence, not the server's
  // acknowledgements, says where to start.
  absl::StatusOr<std::unique_ptr<PullConsumer>> Consume(const std::string& stream,
                                                        const std::string& subject,
                                                        const std::string& durable,
                                                        uint64_t start_sequence);
  // NotFound when there is no such consumer.
  absl::Status DeleteConsumer(const std::string& stream, const std::string& durable);

  // Creates the bucket or opens the existing one (its max age and history
  // as they are). Several nodes creating it at once all get it (a creation
  // that loses the race opens the winner's, retried within admin_timeout).
  // A soft bucket whose stream does not answer for half of admin_timeout
  // while JetStream does (its account information) is deleted and made
  // again, saying so in the log.
  absl::StatusOr<std::unique_ptr<KeyValue>> EnsureBucket(const BucketSpec& spec);

  // The largest message the connected server takes (its max_payload;
  // NATS's default 1 MiB), 0 when not connected.
  int64_t max_payload() const;
  // Connected now (not reconnecting, not closed).
  bool connected() const;
  // The server the connection is on ("" when none).
  std::string connected_url() const;

  static bool ValidName(std::string_view name);
  static bool ValidSubject(std::string_view subject);

 private:
  friend class PullConsumer;
  struct Impl;
  explicit JetStream(std::unique_ptr<Impl> impl, JetStreamOptions options);
  std::unique_ptr<Impl> impl_;
  JetStreamOptions options_;
};

}  // namespace zoom::cluster

#endif  // ZOOM_SERVER_CLUSTER_JETSTREAM_H_
