#!/usr/bin/env bash
# Build the image builder (main.go beside this script, on go-containerregistry) into a cache outside
# the repo, keyed by go-containerregistry's version (the directory) and by its own source (the file
# name), so an edited main.go is rebuilt. Prints the binary's path. scripts/image.sh and
# scripts/release.sh run it.
#
# Safe to start several times at once: one build runs under a lock, the others wait for it.
set -euo pipefail
src=$(cd "$(dirname "$0")" && pwd)
cache_root=${EDGEGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/edgegate}
ggcr=$(awk '{for (i = 1; i < NF; i++) if ($i == "github.com/google/go-containerregistry") print $(i + 1)}' "$src/go.mod")
src_hash=$(cat "$src/go.mod" "$src/go.sum" "$src/main.go" | sha256sum | cut -c1-12)
builder_dir=$cache_root/image-builder/$ggcr
builder=$builder_dir/image-builder-$src_hash
if [[ ! -x $builder ]]; then
  mkdir -p "$builder_dir"
  exec 9>"$builder_dir/.lock"
  flock 9
  if [[ ! -x $builder ]]; then # else built by whoever held the lock before us
    start=$(date +%s)
    (cd "$src" && GOFLAGS=-mod=mod go build -p 2 -trimpath -ldflags "-s -w" -o "$builder.tmp" .) >&2
    mv "$builder.tmp" "$builder"
    echo "built the image builder (go-containerregistry $ggcr) in $(($(date +%s) - start))s" >&2
  fi
fi
echo "$builder"
