#!/usr/bin/env bash
# Build promtool from the Prometheus Go module (through the Go module proxy) into a cache outside
# the repo, keyed by version, so a second run is instant. Prints the path of the binary.
#
# Safe to start several times at once (the monitoring tests do): one build runs under a lock, the
# others wait for it and then find the binary.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=$(awk '{for (i = 1; i < NF; i++) if ($i == "github.com/prometheus/prometheus") print $(i + 1)}' "$here/go.mod")
cache=${EDGEGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/edgegate}/promtool/${version}
if [[ -x $cache/promtool ]]; then
  echo "$cache/promtool"
  exit 0
fi
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [[ -x $cache/promtool ]]; then # built by whoever held the lock before us
  echo "$cache/promtool"
  exit 0
fi
cd "$here"
start=$(date +%s)
GOFLAGS=-mod=mod go build -p 2 -trimpath -ldflags "-s -w" -o "$cache/promtool.tmp" github.com/prometheus/prometheus/cmd/promtool >&2
mv "$cache/promtool.tmp" "$cache/promtool"
echo "built promtool ${version} in $(( $(date +%s) - start ))s" >&2
echo "$cache/promtool"
