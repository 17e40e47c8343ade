// File: server/cluster/jetstream_messages.cc
//
// JetStream's messages: publishing (Publish, PublishAfter), reading one
// back (GetMessage) and core NATS notices. Calls the NATS C client
// (jetstream_internal.h).
#include <nats/nats.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/cluster/jetstream.h"
#include "server/cluster/jetstream_internal.h"

namespace zoom::cluster {

using nats_internal::FromNats;
using nats_internal::Millis;

namespace {

// One publish with its options; `what` names it in errors.
absl::StatusOr<PubAck> PublishWith(jsCtx* js, const std::string& subject, std::string_view data,
                                   jsPubOptions po, const std::string& what) {
  jsPubAck* ack = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  natsStatus s = js_Publish(&ack, js, subject.c_str(), data.data(), static_cast<int>(data.size()),
                            &po, &code);
  if (s == NATS_NO_RESPONDERS) {
    // libnats calls this "JetStream not enabled"; for a publish it means no
    // stream (leader) takes the subject now.
    return absl::UnavailableError(absl::StrCat(
        what, ": no JetStream stream takes this subject now (the stream is missing, or has no "
        "leader: is the NATS cluster up?)"));
  }
  if (s != NATS_OK) return FromNats(s, code, what);
  PubAck out;
  out.sequence = ack->Sequence;
  out.duplicate = ack->Duplicate;
  jsPubAck_Destroy(ack);
  return out;
}

}  // namespace

absl::StatusOr<PubAck> JetStream::Publish(const std::string& subject, std::string_view data,
                                          const std::string& message_id,
                                          absl::Duration timeout) {
  jsPubOptions po;
  jsPubOptions_Init(&po);
  po.MaxWait = Millis(timeout > absl::ZeroDuration()
                          ? std::max(absl::Milliseconds(1), std::min(timeout,
                                                                     options_.request_timeout))
                          : options_.request_timeout);
  if (!message_id.empty()) po.MsgId = message_id.c_str();
  return PublishWith(impl_->js, subject, data, po,
                     absl::StrCat("publish to ", subject, " (", data.size(), " bytes)"));
}

absl::StatusOr<PubAck> JetStream::PublishAfter(const std::string& subject,
                                               std::string_view data,
                                               const std::string& message_id,
                                               uint64_t expected_last) {
  jsPubOptions po;
  jsPubOptions_Init(&po);
  po.MaxWait = Millis(options_.request_timeout);
  if (!message_id.empty()) po.MsgId = message_id.c_str();
  po.ExpectLastSubjectSeq = expected_last;
  // 0 means "not checked" to libnats: "no message yet" is asked as such.
  if (expected_last == 0) po.ExpectNoMessage = true;
  return PublishWith(impl_->js, subject, data, po,
                     absl::StrCat("publish to ", subject, " after sequence ", expected_last));
}

absl::StatusOr<LogMessage> JetStream::GetMessage(const std::string& stream, uint64_t sequence,
                                                 bool direct) const {
  natsMsg* msg = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  natsStatus s;
  if (direct) {
    jsDirectGetMsgOptions dg;
    jsDirectGetMsgOptions_Init(&dg);
    dg.Sequence = sequence;
    s = js_DirectGetMsg(&msg, impl_->js, stream.c_str(), nullptr, &dg);
  } else {
    s = js_GetMsg(&msg, impl_->js, stream.c_str(), sequence, nullptr, &code);
  }
  if (s == NATS_NOT_FOUND && code != JSStreamNotFoundErr) {
    return absl::NotFoundError(absl::StrCat("no message at sequence ", sequence, " of ",
                                            stream));
  }
  if (s != NATS_OK) {
    return FromNats(s, code, absl::StrCat("message ", sequence, " of ", stream));
  }
  LogMessage out;
  out.sequence = natsMsg_GetSequence(msg);
  if (const char* subject = natsMsg_GetSubject(msg); subject != nullptr) out.subject = subject;
  if (const char* data = natsMsg_GetData(msg); data != nullptr) {
    out.data.assign(data, natsMsg_GetDataLength(msg));
  }
  const char* id = nullptr;
  if (natsMsgHeader_Get(msg, "Nats-Msg-Id", &id) == NATS_OK && id != nullptr) out.id = id;
  natsMsg_Destroy(msg);
  return out;
}

// ---- notices (core NATS) ------------------------------------------------------------

// The handler's state, shared by the Subscription and the library's
// closure (a heap copy of the shared_ptr, freed by the completion
// callback once the library calls the handler no more).
struct NoticeState {
  absl::Mutex mu;
  bool closed ABSL_GUARDED_BY(mu) = false;
  std::function<void(std::string_view)> on_message;
};

struct Subscription::Impl {
  natsSubscription* sub = nullptr;
  std::shared_ptr<NoticeState> state;
  ~Impl() {
    {
      // Waits for a handler running now; none runs after this.
      absl::MutexLock l(&state->mu);
      state->closed = true;
    }
    if (sub != nullptr) {
      (void)natsSubscription_Unsubscribe(sub);
      natsSubscription_Destroy(sub);
    }
  }
};

Subscription::Subscription(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Subscription::~Subscription() = default;

namespace {

void OnNotice(natsConnection*, natsSubscription*, natsMsg* msg, void* closure) {
  auto* state = static_cast<std::shared_ptr<NoticeState>*>(closure);
  {
    absl::MutexLock l(&(*state)->mu);
    if (!(*state)->closed) {
      const char* data = natsMsg_GetData(msg);
      (*state)->on_message(data == nullptr
                               ? std::string_view()
                               : std::string_view(data, natsMsg_GetDataLength(msg)));
    }
  }
  natsMsg_Destroy(msg);
}

void OnNoticeComplete(void* closure) { delete static_cast<std::shared_ptr<NoticeState>*>(closure); }

}  // namespace

absl::Status JetStream::PublishNotice(const std::string& subject, std::string_view data) {
  natsStatus s = natsConnection_Publish(impl_->nc, subject.c_str(), data.data(),
                                        static_cast<int>(data.size()));
  return FromNats(s, 0, absl::StrCat("notice on ", subject));
}

absl::StatusOr<std::unique_ptr<Subscription>> JetStream::Subscribe(
    const std::string& subject, std::function<void(std::string_view)> on_message) {
  auto impl = std::make_unique<Subscription::Impl>();
  impl->state = std::make_shared<NoticeState>();
  impl->state->on_message = std::move(on_message);
  auto* closure = new std::shared_ptr<NoticeState>(impl->state);
  natsStatus s = natsConnection_Subscribe(&impl->sub, impl_->nc, subject.c_str(), OnNotice,
                                          closure);
  if (s != NATS_OK) {
    delete closure;
    impl->sub = nullptr;
    return FromNats(s, 0, absl::StrCat("subscribing to ", subject));
  }
  s = natsSubscription_SetOnCompleteCB(impl->sub, OnNoticeComplete, closure);
  if (s != NATS_OK) {
    // The closure stays (a few bytes) rather than be freed under a handler.
    return FromNats(s, 0, absl::StrCat("subscribing to ", subject));
  }
  return std::unique_ptr<Subscription>(new Subscription(std::move(impl)));
}
}  // namespace zoom::cluster
