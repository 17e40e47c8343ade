"""Generated protobuf and gRPC stubs of proto/zoom/v1 (tools/gen_protos.sh)."""
