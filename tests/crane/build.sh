#!/usr/bin/env bash
# Build crane (go-containerregistry's CLI) from its Go module (through the Go module proxy) into a
# cache outside the repo, keyed by version, so a second run is instant. Prints the binary's path.
# The version is the one tests/image builds the image with (go.mod beside this script).
#
# Safe to start several times at once: one build runs under a lock, the others wait for it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=$(awk '$1 == "require" && $2 == "github.com/google/go-containerregistry" {print $3}' "$here/go.mod")
cache=${EDGEGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/edgegate}/crane/${version}
if [[ -x $cache/crane ]]; then
  echo "$cache/crane"
  exit 0
fi
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [[ -x $cache/crane ]]; then # built by whoever held the lock before us
  echo "$cache/crane"
  exit 0
fi
cd "$here"
start=$(date +%s)
GOFLAGS=-mod=mod go build -p 2 -trimpath -ldflags "-s -w" -o "$cache/crane.tmp" github.com/google/go-containerregistry/cmd/crane >&2
mv "$cache/crane.tmp" "$cache/crane"
echo "built crane ${version} in $(( $(date +%s) - start ))s" >&2
echo "$cache/crane"
