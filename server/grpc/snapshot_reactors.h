// File: server/grpc/snapshot_reactors.h
//
// The streaming snapshot RPCs of VectorSearchService over its backend:
//   DownloadSnapshot  the archive in chunks of 1 MiB, each read on the pool
//                     (never on gRPC's thread), the next after the last was
//                     sent
//   RestoreSnapshot   raw messages (one that does not parse ends the call
//                     naming it); the first names the target (and maybe a
//                     source on the server); an upload's bytes are staged by
//                     the backend as they come (each message on the pool,
//                     the next read after it: flow control), then the
//                     archive is verified and restored.
#ifndef ZOOM_SERVER_GRPC_SNAPSHOT_REACTORS_H_
#define ZOOM_SERVER_GRPC_SNAPSHOT_REACTORS_H_

#include <grpcpp/grpcpp.h>

#include "server/grpc/vector_search_service.h"
#include "zoom/v1/zoom.pb.h"

namespace zoom::server {

grpc::ServerWriteReactor<v1::SnapshotChunk>* NewDownloadReactor(
    const VectorSearchService* service, grpc::CallbackServerContext* ctx,
    const v1::DownloadSnapshotRequest& req);
grpc::ServerReadReactor<grpc::ByteBuffer>* NewRestoreReactor(const VectorSearchService* service,
                                                             grpc::CallbackServerContext* ctx,
                                                             grpc::ByteBuffer* resp);

}  // namespace zoom::server

#endif  // ZOOM_SERVER_GRPC_SNAPSHOT_REACTORS_H_
