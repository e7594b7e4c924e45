#!/usr/bin/env bash
# Build one command of a Go module (through the Go module proxy) into a cache outside the repo,
# keyed by the module's version in DIR/go.mod, so a second run is instant. Prints the binary's
# path. The tools' build.sh scripts (tests/crane, tests/promtool, tests/cosign) call it.
#
#   tests/go-tool.sh DIR MODULE PACKAGE     e.g. tests/crane github.com/google/go-containerregistry
#                                                github.com/google/go-containerregistry/cmd/crane
#
# Safe to start several times at once (tests do): one build runs under a lock, the others wait for
# it and then find the binary.
set -euo pipefail
[[ $# == 3 ]] || { echo "usage: tests/go-tool.sh DIR MODULE PACKAGE" >&2; exit 2; }
dir=$(cd "$1" && pwd) module=$2 package=$3
name=$(basename "$package")
version=$(awk -v m="$module" '{for (i = 1; i < NF; i++) if ($i == m) print $(i + 1)}' "$dir/go.mod" | head -n1)
[[ -n $version ]] || { echo "go-tool.sh: $dir/go.mod requires no $module" >&2; exit 2; }
cache=${EDGEGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/edgegate}/$name/$version
if [[ -x $cache/$name ]]; then
  echo "$cache/$name"
  exit 0
fi
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [[ -x $cache/$name ]]; then # built by whoever held the lock before us
  echo "$cache/$name"
  exit 0
fi
cd "$dir"
start=$(date +%s)
GOFLAGS=-mod=mod go build -p 2 -trimpath -ldflags "-s -w" -o "$cache/$name.tmp" "$package" >&2
mv "$cache/$name.tmp" "$cache/$name"
echo "built $name $version in $(($(date +%s) - start))s" >&2
echo "$cache/$name"
