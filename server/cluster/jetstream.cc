// File: server/cluster/jetstream.cc
//
// With jetstream_messages.cc, the files that call the NATS C client: the
// connection, streams, consumers and buckets here. Every natsStatus (with
// its JetStream error code and the library's last error text) becomes an
// absl::Status here (nats_internal::FromNats).
#include "server/cluster/jetstream.h"

#include <nats/nats.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/logging.h"
#include "server/cluster/jetstream_internal.h"

namespace zoom::cluster {
namespace nats_internal {

int64_t Millis(absl::Duration d) { return std::max<int64_t>(1, absl::ToInt64Milliseconds(d)); }

std::string LastErrorText(natsStatus s) {
  natsStatus last = NATS_OK;
  const char* text = nats_GetLastError(&last);
  if (text != nullptr && text[0] != '\0') return text;
  return natsStatus_GetText(s);
}

// `what`: the operation and its object ("publish to zoomd.c.0").
absl::Status FromNats(natsStatus s, int code, const std::string& what) {
  if (s == NATS_OK) return absl::OkStatus();
  const std::string text = LastErrorText(s);
  std::string msg = absl::StrCat(what, ": ", text);
  if (s == NATS_NO_RESPONDERS) {
    // libnats reports it as "JetStream not enabled" (10076); it is as often
    // a stream or bucket without a leader (its NATS servers lost their
    // majority): either way, nothing answered now.
    return absl::UnavailableError(absl::StrCat(
        what, ": no JetStream server answered (is JetStream enabled on the NATS servers, and "
              "do a majority of them run?)"));
  }
  if (code != 0) absl::StrAppend(&msg, " (JetStream error ", code, ")");
  switch (code) {
    case JSStreamNotFoundErr:
    case JSConsumerNotFoundErr:
      return absl::NotFoundError(msg);
    case JSStreamWrongLastSequenceErr:
      return absl::AbortedError(msg);
    case JSClusterNoPeersErr:
    case JSInsufficientResourcesErr:
      return absl::FailedPreconditionError(msg);
    case JSNotEnabledErr:
      return absl::FailedPreconditionError(
          absl::StrCat(msg, "; start nats-server with JetStream (-js)"));
    default:
      break;
  }
  switch (s) {
    case NATS_NOT_FOUND:
      return absl::NotFoundError(msg);
    case NATS_INVALID_ARG:
    case NATS_INVALID_SUBJECT:
      return absl::InvalidArgumentError(msg);
    case NATS_TIMEOUT:
    case NATS_NO_RESPONDERS:
    case NATS_CONNECTION_CLOSED:
    case NATS_CONNECTION_DISCONNECTED:
    case NATS_NOT_YET_CONNECTED:
    case NATS_NO_SERVER:
    case NATS_STALE_CONNECTION:
    case NATS_IO_ERROR:
      return absl::UnavailableError(msg);
    default:
      break;
  }
  if (absl::StrContains(text, "wrong last sequence")) return absl::AbortedError(msg);
  if (absl::StrContains(text, "not found")) return absl::NotFoundError(msg);
  return absl::UnavailableError(msg);
}

}  // namespace nats_internal

namespace {

using nats_internal::FromNats;
using nats_internal::Millis;

bool TokenChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

}  // namespace

bool JetStream::ValidName(std::string_view name) {
  return !name.empty() && name.size() <= 200 && std::all_of(name.begin(), name.end(), TokenChar);
}

bool JetStream::ValidSubject(std::string_view subject) {
  if (subject.empty() || subject.size() > 255) return false;
  size_t token = 0;
  for (char c : subject) {
    if (c == '.') {
      if (token == 0) return false;
      token = 0;
    } else if (TokenChar(c)) {
      ++token;
    } else {
      return false;
    }
  }
  return token > 0;
}


JetStream::JetStream(std::unique_ptr<Impl> impl, JetStreamOptions options)
    : impl_(std::move(impl)), options_(std::move(options)) {}
JetStream::~JetStream() = default;

absl::StatusOr<std::unique_ptr<JetStream>> JetStream::Connect(const JetStreamOptions& options) {
  if (options.servers.empty()) {
    return absl::InvalidArgumentError("no NATS server given (nats://host:port)");
  }
  for (const std::string& url : options.servers) {
    if (!absl::StartsWith(url, "nats://") && !absl::StartsWith(url, "tls://")) {
      return absl::InvalidArgumentError(
          absl::StrCat("NATS server URL '", url, "' must start with nats:// or tls://"));
    }
  }
  natsOptions* opts = nullptr;
  natsStatus s = natsOptions_Create(&opts);
  if (s != NATS_OK) return FromNats(s, 0, "NATS options");
  std::vector<const char*> urls;
  for (const std::string& url : options.servers) urls.push_back(url.c_str());
  s = natsOptions_SetServers(opts, urls.data(), static_cast<int>(urls.size()));
  if (s == NATS_OK) s = natsOptions_SetName(opts, options.name.c_str());
  if (s == NATS_OK) s = natsOptions_SetTimeout(opts, Millis(options.connect_timeout));
  if (s == NATS_OK) s = natsOptions_SetAllowReconnect(opts, true);
  if (s == NATS_OK) s = natsOptions_SetMaxReconnect(opts, -1);
  if (s == NATS_OK) s = natsOptions_SetReconnectWait(opts, Millis(options.reconnect_wait));
  // A dead server is noticed within ~2 s on an idle connection.
  // Publishes leave at once, not when the library's buffer or flusher says:
  // a replica's notice of its durable position is on a write's path
  // (write concerns), as is each entry's acknowledgement.
  if (s == NATS_OK) s = natsOptions_SetSendAsap(opts, true);
  if (s == NATS_OK) s = natsOptions_SetPingInterval(opts, 1000);
  if (s == NATS_OK) s = natsOptions_SetMaxPingsOut(opts, 2);
  auto impl = std::make_unique<Impl>();
  if (s == NATS_OK) s = natsConnection_Connect(&impl->nc, opts);
  natsOptions_Destroy(opts);
  if (s != NATS_OK) {
    return FromNats(s, 0,
                    absl::StrCat("connecting to NATS at ", absl::StrJoin(options.servers, ", ")));
  }
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Wait = Millis(options.request_timeout);
  s = natsConnection_JetStream(&impl->js, impl->nc, &jo);
  if (s != NATS_OK) return FromNats(s, 0, "JetStream context");
  jsOptions ja;
  jsOptions_Init(&ja);
  ja.Wait = Millis(options.admin_timeout);
  s = natsConnection_JetStream(&impl->admin, impl->nc, &ja);
  if (s != NATS_OK) return FromNats(s, 0, "JetStream context");
  return std::unique_ptr<JetStream>(new JetStream(std::move(impl), options));
}

int64_t JetStream::max_payload() const { return natsConnection_GetMaxPayload(impl_->nc); }

bool JetStream::connected() const {
  return natsConnection_Status(impl_->nc) == NATS_CONN_STATUS_CONNECTED;
}

std::string JetStream::connected_url() const {
  char buf[256] = {0};
  if (natsConnection_GetConnectedUrl(impl_->nc, buf, sizeof(buf)) != NATS_OK) return "";
  return buf;
}

absl::Status JetStream::EnsureStream(const StreamSpec& spec) {
  if (!ValidName(spec.name)) {
    return absl::InvalidArgumentError(absl::StrCat("bad stream name '", spec.name, "'"));
  }
  if (spec.subjects.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("stream ", spec.name, " needs subjects"));
  }
  for (const std::string& subject : spec.subjects) {
    if (!ValidSubject(subject)) {
      return absl::InvalidArgumentError(absl::StrCat("bad subject '", subject, "'"));
    }
  }
  if (spec.replicas < 1 || spec.replicas > 5) {
    return absl::InvalidArgumentError(
        absl::StrCat("stream replicas must be 1..5, not ", spec.replicas));
  }
  std::vector<const char*> subjects;
  for (const std::string& subject : spec.subjects) subjects.push_back(subject.c_str());
  jsStreamConfig cfg;
  jsStreamConfig_Init(&cfg);
  cfg.Name = spec.name.c_str();
  cfg.Subjects = subjects.data();
  cfg.SubjectsLen = static_cast<int>(subjects.size());
  cfg.Storage = js_FileStorage;
  cfg.Retention = js_LimitsPolicy;
  cfg.Replicas = spec.replicas;
  cfg.Duplicates = absl::ToInt64Nanoseconds(spec.duplicate_window);
  cfg.MaxBytes = spec.max_bytes > 0 ? spec.max_bytes : -1;
  cfg.MaxMsgSize = spec.max_message_bytes > 0 ? spec.max_message_bytes : -1;
  // Any server of the stream answers a direct get (GetMessage's cheap path).
  cfg.AllowDirect = true;

  jsStreamInfo* info = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  natsStatus s = js_GetStreamInfo(&info, impl_->admin, spec.name.c_str(), nullptr, &code);
  if (s == NATS_NOT_FOUND || code == JSStreamNotFoundErr) {
    code = static_cast<jsErrCode>(0);
    s = js_AddStream(&info, impl_->admin, &cfg, nullptr, &code);
    if (s == NATS_OK) {
      jsStreamInfo_Destroy(info);
      return absl::OkStatus();
    }
    // Another node created it meanwhile: check it as an existing one.
    if (code != JSStreamNameExistErr) {
      return FromNats(s, code, absl::StrCat("creating stream ", spec.name));
    }
    code = static_cast<jsErrCode>(0);
    s = js_GetStreamInfo(&info, impl_->admin, spec.name.c_str(), nullptr, &code);
  }
  if (s != NATS_OK) return FromNats(s, code, absl::StrCat("stream ", spec.name));
  std::vector<std::string> have;
  for (int i = 0; i < info->Config->SubjectsLen; ++i) have.emplace_back(info->Config->Subjects[i]);
  const int64_t have_replicas = info->Config->Replicas;
  jsStreamInfo_Destroy(info);
  std::vector<std::string> want = spec.subjects;
  std::sort(have.begin(), have.end());
  std::sort(want.begin(), want.end());
  if (have != want) {
    return absl::FailedPreconditionError(absl::StrCat(
        "stream ", spec.name, " exists with subjects [", absl::StrJoin(have, ", "),
        "], not [", absl::StrJoin(want, ", "), "]: another cluster or shard count owns it"));
  }
  if (have_replicas != spec.replicas) {
    return absl::FailedPreconditionError(absl::StrCat("stream ", spec.name, " exists with ",
                                                      have_replicas, " replicas, not ",
                                                      spec.replicas));
  }
  return absl::OkStatus();
}

absl::StatusOr<StreamState> JetStream::GetStreamState(const std::string& stream) const {
  jsStreamInfo* info = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  natsStatus s = js_GetStreamInfo(&info, impl_->js, stream.c_str(), nullptr, &code);
  if (s != NATS_OK) return FromNats(s, code, absl::StrCat("stream ", stream));
  StreamState state;
  state.messages = info->State.Msgs;
  state.bytes = info->State.Bytes;
  state.first_sequence = info->State.FirstSeq;
  state.last_sequence = info->State.LastSeq;
  state.replicas = static_cast<int>(info->Config->Replicas);
  jsStreamInfo_Destroy(info);
  return state;
}

absl::StatusOr<uint64_t> JetStream::LastSequence(const std::string& stream,
                                                 const std::string& subject) const {
  natsMsg* msg = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  natsStatus s = js_GetLastMsg(&msg, impl_->js, stream.c_str(), subject.c_str(), nullptr, &code);
  if (s == NATS_NOT_FOUND && code != JSStreamNotFoundErr) return 0;  // no message on it
  if (s != NATS_OK) {
    return FromNats(s, code, absl::StrCat("last message of ", subject, " in ", stream));
  }
  const uint64_t seq = natsMsg_GetSequence(msg);
  natsMsg_Destroy(msg);
  return seq;
}

absl::Status JetStream::DeleteStream(const std::string& stream) {
  jsErrCode code = static_cast<jsErrCode>(0);
  natsStatus s = js_DeleteStream(impl_->admin, stream.c_str(), nullptr, &code);
  return FromNats(s, code, absl::StrCat("deleting stream ", stream));
}

absl::Status JetStream::PurgeBefore(const std::string& stream, const std::string& subject,
                                    uint64_t sequence) {
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Wait = Millis(options_.request_timeout);
  jo.Stream.Purge.Subject = subject.c_str();
  jo.Stream.Purge.Sequence = sequence;
  jsErrCode code = static_cast<jsErrCode>(0);
  natsStatus s = js_PurgeStream(impl_->js, stream.c_str(), &jo, &code);
  return FromNats(s, code, absl::StrCat("purging ", subject, " before ", sequence));
}


absl::StatusOr<std::unique_ptr<PullConsumer>> JetStream::Consume(const std::string& stream,
                                                                 const std::string& subject,
                                                                 const std::string& durable,
                                                                 uint64_t start_sequence) {
  if (!ValidName(durable)) {
    return absl::InvalidArgumentError(absl::StrCat("bad consumer name '", durable, "'"));
  }
  if (start_sequence == 0) start_sequence = 1;
  absl::Status del = DeleteConsumer(stream, durable);
  if (!del.ok() && !absl::IsNotFound(del)) return del;
  jsConsumerConfig cc;
  jsConsumerConfig_Init(&cc);
  cc.Durable = durable.c_str();
  cc.FilterSubject = subject.c_str();
  cc.DeliverPolicy = js_DeliverByStartSequence;
  cc.OptStartSeq = start_sequence;
  cc.AckPolicy = js_AckAll;
  cc.AckWait = absl::ToInt64Nanoseconds(absl::Seconds(30));
  cc.MaxAckPending = 1 << 20;
  jsConsumerInfo* ci = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  natsStatus s = js_AddConsumer(&ci, impl_->admin, stream.c_str(), &cc, nullptr, &code);
  if (s != NATS_OK) {
    return FromNats(s, code, absl::StrCat("creating consumer ", durable, " on ", stream));
  }
  jsConsumerInfo_Destroy(ci);
  jsSubOptions so;
  jsSubOptions_Init(&so);
  so.Stream = stream.c_str();
  so.Consumer = durable.c_str();
  so.ManualAck = true;
  auto impl = std::make_unique<PullConsumer::Impl>();
  code = static_cast<jsErrCode>(0);
  s = js_PullSubscribe(&impl->sub, impl_->js, subject.c_str(), durable.c_str(), nullptr, &so,
                       &code);
  if (s != NATS_OK) {
    return FromNats(s, code, absl::StrCat("binding to consumer ", durable, " on ", stream));
  }
  return std::unique_ptr<PullConsumer>(new PullConsumer(this, stream, durable, std::move(impl)));
}

absl::Status JetStream::DeleteConsumer(const std::string& stream, const std::string& durable) {
  jsErrCode code = static_cast<jsErrCode>(0);
  natsStatus s = js_DeleteConsumer(impl_->admin, stream.c_str(), durable.c_str(), nullptr, &code);
  return FromNats(s, code, absl::StrCat("deleting consumer ", durable, " of ", stream));
}

PullConsumer::PullConsumer(JetStream* js, std::string stream, std::string durable,
                           std::unique_ptr<Impl> impl)
    : js_(js), stream_(std::move(stream)), durable_(std::move(durable)), impl_(std::move(impl)) {}
PullConsumer::~PullConsumer() = default;

absl::StatusOr<std::vector<LogMessage>> PullConsumer::Fetch(int max_messages,
                                                            absl::Duration wait) {
  impl_->Release();
  natsMsgList list = {nullptr, 0};
  jsErrCode code = static_cast<jsErrCode>(0);
  natsStatus s = natsSubscription_Fetch(&list, impl_->sub, std::max(1, max_messages),
                                        Millis(wait), &code);
  std::vector<LogMessage> out;
  if (s == NATS_TIMEOUT) return out;  // nothing came within `wait`
  if (s != NATS_OK) return FromNats(s, code, absl::StrCat("fetching from ", durable_));
  out.reserve(list.Count);
  absl::Status status;
  for (int i = 0; i < list.Count; ++i) {
    natsMsg* msg = list.Msgs[i];
    jsMsgMetaData* meta = nullptr;
    natsStatus ms = natsMsg_GetMetaData(&meta, msg);
    if (ms != NATS_OK) {
      status = FromNats(ms, 0, absl::StrCat("metadata of a message of ", durable_));
      break;
    }
    LogMessage m;
    m.subject = natsMsg_GetSubject(msg);
    m.sequence = meta->Sequence.Stream;
    m.pending = meta->NumPending;
    m.delivery = meta->Sequence.Consumer;
    m.timestamp = meta->Timestamp > 0 ? static_cast<uint64_t>(meta->Timestamp) : 0;
    const char* id = nullptr;
    if (natsMsgHeader_Get(msg, "Nats-Msg-Id", &id) == NATS_OK && id != nullptr) m.id = id;
    const char* data = natsMsg_GetData(msg);
    if (data != nullptr) m.data.assign(data, natsMsg_GetDataLength(msg));
    jsMsgMetaData_Destroy(meta);
    impl_->held.emplace_back(m.sequence, msg);
    list.Msgs[i] = nullptr;
    out.push_back(std::move(m));
  }
  natsMsgList_Destroy(&list);
  if (!status.ok()) return status;
  return out;
}

absl::Status PullConsumer::AckThrough(uint64_t sequence) {
  natsMsg* best = nullptr;
  uint64_t best_seq = 0;
  for (auto& [seq, msg] : impl_->held) {
    if (seq <= sequence && seq >= best_seq) {
      best = msg;
      best_seq = seq;
    }
  }
  if (best == nullptr) return absl::OkStatus();  // nothing of the last fetch so far
  natsStatus s = natsMsg_Ack(best, nullptr);
  return FromNats(s, 0, absl::StrCat("acknowledging ", best_seq, " on ", durable_));
}

absl::StatusOr<uint64_t> PullConsumer::Pending() const {
  jsConsumerInfo* ci = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  natsStatus s = js_GetConsumerInfo(&ci, js_->impl_->js, stream_.c_str(), durable_.c_str(),
                                    nullptr, &code);
  if (s != NATS_OK) return FromNats(s, code, absl::StrCat("consumer ", durable_));
  const uint64_t pending = ci->NumPending;
  jsConsumerInfo_Destroy(ci);
  return pending;
}

KeyValue::KeyValue(std::string bucket, std::unique_ptr<Impl> impl)
    : bucket_(std::move(bucket)), impl_(std::move(impl)) {}
KeyValue::~KeyValue() = default;

absl::StatusOr<std::unique_ptr<KeyValue>> JetStream::EnsureBucket(const BucketSpec& spec) {
  if (!ValidName(spec.name)) {
    return absl::InvalidArgumentError(absl::StrCat("bad bucket name '", spec.name, "'"));
  }
  if (spec.history < 1 || spec.history > 64) {
    return absl::InvalidArgumentError("bucket history must be 1..64");
  }
  auto impl = std::make_unique<KeyValue::Impl>();
  natsStatus s = NATS_OK;
  const absl::Time start = absl::Now();
  const absl::Time end = start + options_.admin_timeout;
  bool remade = false;
  for (;;) {
    s = js_KeyValue(&impl->kv, impl_->admin, spec.name.c_str());
    if (s == NATS_TIMEOUT && spec.soft && !remade &&
        absl::Now() - start >= options_.admin_timeout / 2) {
      // Its stream does not answer. If JetStream does, the stream's group
      // is stuck (after a power failure of its servers): a soft bucket's
      // entries come back from their writers, so it is made again.
      jsAccountInfo* account = nullptr;
      jsErrCode code = static_cast<jsErrCode>(0);
      if (js_GetAccountInfo(&account, impl_->admin, nullptr, &code) == NATS_OK) {
        jsAccountInfo_Destroy(account);
        const std::string stream = absl::StrCat("KV_", spec.name);
        natsStatus d = js_DeleteStream(impl_->admin, stream.c_str(), nullptr, &code);
        ZOOM_LOG(WARNING, "key-value bucket ", spec.name, ": its stream ", stream,
                 " does not answer while JetStream does: deleted (",
                 d == NATS_OK ? "done" : natsStatus_GetText(d), ") to be made again");
        remade = true;
        continue;
      }
    }
    if (s == NATS_NOT_FOUND) {
      kvConfig cfg;
      kvConfig_Init(&cfg);
      cfg.Bucket = spec.name.c_str();
      cfg.History = static_cast<uint8_t>(spec.history);
      cfg.TTL = absl::ToInt64Nanoseconds(spec.max_age);
      cfg.Replicas = spec.replicas;
      cfg.StorageType = js_FileStorage;
      s = js_CreateKeyValue(&impl->kv, impl_->admin, &cfg);
    }
    // Another node's creation of it may be under way (its Raft group
    // forming): look again.
    if (s == NATS_OK || absl::Now() >= end) break;
    absl::SleepFor(absl::Milliseconds(200));
  }
  if (s != NATS_OK) return FromNats(s, 0, absl::StrCat("key-value bucket ", spec.name));
  // Reads and writes wait request_timeout, not admin_timeout: a heartbeat
  // or a map read that cannot be served soon is better retried.
  kvStore_Destroy(impl->kv);
  impl->kv = nullptr;
  s = js_KeyValue(&impl->kv, impl_->js, spec.name.c_str());
  if (s != NATS_OK) return FromNats(s, 0, absl::StrCat("key-value bucket ", spec.name));
  impl->js = impl_->js;
  return std::unique_ptr<KeyValue>(new KeyValue(spec.name, std::move(impl)));
}

namespace {
absl::Status CheckKey(std::string_view key) {
  if (!JetStream::ValidSubject(key)) {
    return absl::InvalidArgumentError(absl::StrCat("bad key '", std::string(key), "'"));
  }
  return absl::OkStatus();
}
}  // namespace

absl::StatusOr<std::optional<KvEntry>> KeyValue::Get(std::string_view key) const {
  if (absl::Status c = CheckKey(key); !c.ok()) return c;
  const std::string k(key);
  kvEntry* e = nullptr;
  natsStatus s = kvStore_Get(&e, impl_->kv, k.c_str());
  if (s == NATS_NOT_FOUND) return std::optional<KvEntry>();
  if (s != NATS_OK) return FromNats(s, 0, absl::StrCat("get ", bucket_, "/", k));
  KvEntry out;
  const void* v = kvEntry_Value(e);
  if (v != nullptr) out.value.assign(static_cast<const char*>(v), kvEntry_ValueLen(e));
  out.revision = kvEntry_Revision(e);
  kvEntry_Destroy(e);
  return std::optional<KvEntry>(std::move(out));
}

absl::StatusOr<uint64_t> KeyValue::Put(std::string_view key, std::string_view value) {
  if (absl::Status c = CheckKey(key); !c.ok()) return c;
  const std::string k(key);
  uint64_t rev = 0;
  natsStatus s = kvStore_Put(&rev, impl_->kv, k.c_str(), value.data(),
                             static_cast<int>(value.size()));
  if (s != NATS_OK) return FromNats(s, 0, absl::StrCat("put ", bucket_, "/", k));
  return rev;
}

absl::StatusOr<uint64_t> KeyValue::Create(std::string_view key, std::string_view value) {
  if (absl::Status c = CheckKey(key); !c.ok()) return c;
  const std::string k(key);
  uint64_t rev = 0;
  natsStatus s = kvStore_Create(&rev, impl_->kv, k.c_str(), value.data(),
                                static_cast<int>(value.size()));
  if (s != NATS_OK) {
    absl::Status st = FromNats(s, 0, absl::StrCat("create ", bucket_, "/", k));
    if (absl::IsAborted(st)) return absl::AlreadyExistsError(st.message());
    return st;
  }
  return rev;
}

absl::StatusOr<uint64_t> KeyValue::Update(std::string_view key, std::string_view value,
                                          uint64_t revision) {
  if (absl::Status c = CheckKey(key); !c.ok()) return c;
  const std::string k(key);
  uint64_t rev = 0;
  natsStatus s = kvStore_Update(&rev, impl_->kv, k.c_str(), value.data(),
                                static_cast<int>(value.size()), revision);
  if (s != NATS_OK) {
    absl::Status st = FromNats(s, 0, absl::StrCat("update ", bucket_, "/", k, " at revision ",
                                                  revision));
    if (absl::IsAborted(st)) {
      return absl::AbortedError(absl::StrCat(st.message(), ": revision moved, read it again"));
    }
    return st;
  }
  return rev;
}

absl::Status KeyValue::Delete(std::string_view key) {
  if (absl::Status c = CheckKey(key); !c.ok()) return c;
  const std::string k(key);
  return FromNats(kvStore_Delete(impl_->kv, k.c_str()), 0,
                  absl::StrCat("delete ", bucket_, "/", k));
}

absl::StatusOr<std::vector<std::string>> KeyValue::Keys() const {
  // The subjects of the bucket's stream, in one request: no consumer (the
  // client's kvStore_Keys makes one a call, and polling that from every node
  // and router churns a clustered JetStream's consumer leaders). A deleted
  // key's subject stays (its delete marker) until purged: Get says it is
  // gone.
  const std::string prefix = absl::StrCat("$KV.", bucket_, ".");
  const std::string filter = prefix + ">";
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Stream.Info.SubjectsFilter = filter.c_str();
  jsStreamInfo* info = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  const std::string stream = absl::StrCat("KV_", bucket_);
  natsStatus s = js_GetStreamInfo(&info, impl_->js, stream.c_str(), &jo, &code);
  if (s != NATS_OK) return FromNats(s, code, absl::StrCat("keys of ", bucket_));
  std::vector<std::string> out;
  if (info->State.Subjects != nullptr) {
    for (int i = 0; i < info->State.Subjects->Count; ++i) {
      std::string_view subject = info->State.Subjects->List[i].Subject;
      if (subject.substr(0, prefix.size()) == prefix) out.emplace_back(subject.substr(prefix.size()));
    }
  }
  jsStreamInfo_Destroy(info);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace zoom::cluster
