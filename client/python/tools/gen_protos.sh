#!/usr/bin/env bash
# Regenerates the Python stubs in zoomd/_proto/ from the repository's protos
# (proto/zoom/v1/*.proto) with Debian's protoc 3.21 and grpc_python_plugin
# (protobuf-compiler, protobuf-compiler-grpc). The stubs are committed so
# that `pip install ./client/python` needs no protoc; tests/test_stubs.py
# runs this into a temporary directory and fails when they differ.
#
#   client/python/tools/gen_protos.sh [OUT_DIR]   (default: zoomd/_proto)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
proto_dir="$(cd "$here/../../proto" && pwd)"
out="${1:-$here/zoomd/_proto}"
plugin="$(command -v grpc_python_plugin || true)"
if [[ -z "$plugin" ]] || ! command -v protoc >/dev/null; then
  echo "gen_protos: needs protoc and grpc_python_plugin (apt-get install protobuf-compiler protobuf-compiler-grpc)" >&2
  exit 2
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
protoc -I "$proto_dir" --python_out="$tmp" --pyi_out="$tmp" --grpc_python_out="$tmp" \
  --plugin=protoc-gen-grpc_python="$plugin" zoom/v1/zoom.proto zoom/v1/decoder.proto
mkdir -p "$out"
for f in zoom_pb2.py zoom_pb2.pyi zoom_pb2_grpc.py decoder_pb2.py decoder_pb2.pyi decoder_pb2_grpc.py; do
  # The generated modules import each other as the protos' package path
  # (zoom.v1); inside the package they live flat under zoomd._proto.
  sed -e 's/^from zoom\.v1 import /from zoomd._proto import /' \
      -e "s/'zoom\.v1\.\([a-z]*_pb2\)'/'zoomd._proto.\1'/" "$tmp/zoom/v1/$f" > "$out/$f"
done
cat > "$out/__init__.py" <<'PY'
"""Generated protobuf and gRPC stubs of proto/zoom/v1 (tools/gen_protos.sh)."""
PY
