#!/bin/sh
# Starts zoomd with flags from the environment and the command line.
#
# Every variable ZOOMD_<FLAG>=VALUE becomes --<flag>=VALUE (the name lower-
# cased), e.g. ZOOMD_THREADS=16 -> --threads=16. Arguments given to the
# container come after them, so they win. A first argument that does not
# start with "-" is run as a command instead (`docker run zoomd zoomctl list`).
# Writes nothing: works on a read-only root filesystem.
set -eu
if [ "$#" -gt 0 ] && [ "${1#-}" = "$1" ]; then
  exec "$@"
fi
nargs=$#
while IFS= read -r kv; do
  [ -n "$kv" ] || continue
  name=${kv%%=*}
  flag=$(printf '%s' "${name#ZOOMD_}" | tr 'A-Z' 'a-z')
  set -- "$@" "--$flag=${kv#*=}"
done <<ENV
$(env | grep '^ZOOMD_[A-Z0-9_]*=' || true)
ENV
# Move the container's own arguments behind the environment's.
while [ "$nargs" -gt 0 ]; do
  set -- "$@" "$1"
  shift
  nargs=$((nargs - 1))
done
exec zoomd "$@"
