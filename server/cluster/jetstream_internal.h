// File: server/cluster/jetstream_internal.h
//
// What the files that call the NATS C client share (jetstream.cc: the
// connection, streams, consumers, buckets; jetstream_messages.cc:
// publishing, reading one message, notices): the handles behind the
// public classes and the one translation of a natsStatus into an
// absl::Status. Included by those two files only (tests/deps).
#ifndef ZOOM_SERVER_CLUSTER_JETSTREAM_INTERNAL_H_
#define ZOOM_SERVER_CLUSTER_JETSTREAM_INTERNAL_H_

#include <nats/nats.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/cluster/jetstream.h"

namespace zoom::cluster {
namespace nats_internal {

int64_t Millis(absl::Duration d);
// `what`: the operation and its object ("publish to zoomd.c.0").
absl::Status FromNats(natsStatus s, int code, const std::string& what);

}  // namespace nats_internal

struct JetStream::Impl {
  natsConnection* nc = nullptr;
  jsCtx* js = nullptr;
  jsCtx* admin = nullptr;  // the same connection, admin_timeout a request
  ~Impl() {
    if (admin != nullptr) jsCtx_Destroy(admin);
    if (js != nullptr) jsCtx_Destroy(js);
    if (nc != nullptr) {
      natsConnection_Close(nc);
      natsConnection_Destroy(nc);
    }
  }
};

struct PullConsumer::Impl {
  natsSubscription* sub = nullptr;
  // The last fetch's messages (by stream sequence), kept to acknowledge.
  std::vector<std::pair<uint64_t, natsMsg*>> held;
  void Release() {
    for (auto& [seq, msg] : held) natsMsg_Destroy(msg);
    held.clear();
  }
  ~Impl() {
    Release();
    // Destroy only: the durable consumer stays on the server (libnats >= 3.4).
    if (sub != nullptr) natsSubscription_Destroy(sub);
  }
};

struct KeyValue::Impl {
  kvStore* kv = nullptr;
  jsCtx* js = nullptr;  // the JetStream's (it outlives the bucket's handle)
  ~Impl() {
    if (kv != nullptr) kvStore_Destroy(kv);
  }
};

}  // namespace zoom::cluster

#endif  // ZOOM_SERVER_CLUSTER_JETSTREAM_INTERNAL_H_
