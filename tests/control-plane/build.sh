#!/usr/bin/env bash
# Build kube-apiserver and etcd from their Go modules (through the Go module proxy) into a cache
# outside the repo, keyed by version, so a second run is instant.
#
#   tests/control-plane/build.sh           prints the directory holding kube-apiserver and etcd
#   tests/control-plane/build.sh kubectl   also builds kubectl there (for machines without one)
#
# Kubernetes' own module requires its staging modules at v0.0.0 and maps them to ./staging, which
# only works inside its repository; go.mod beside this script replaces each with its published
# v0.<minor>.<patch>. The etcd server module is built from the same module graph.
#
# Safe to start several times at once (tests do): one build runs under a lock, the others wait for
# it and then find the cache filled.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
k8s_version=$(awk '$1 == "k8s.io/kubernetes" {print $2}' "$here/go.mod")
etcd_version=$(awk '$1 == "go.etcd.io/etcd/server/v3" {print $2}' "$here/go.mod")
cache=${EDGEGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/edgegate}/control-plane/${k8s_version}-etcd-${etcd_version}
want_kubectl=${1:-}
ready() { [[ -x $cache/kube-apiserver && -x $cache/etcd && ( -z $want_kubectl || -x $cache/kubectl ) ]]; }
if ready; then
  echo "$cache"
  exit 0
fi
mkdir -p "$(dirname "$cache")"
exec 9>"$cache.lock"
flock 9
if ready; then # built by whoever held the lock before us
  echo "$cache"
  exit 0
fi
rm -rf "$cache.tmp"
cp -a "$cache" "$cache.tmp" 2>/dev/null || mkdir -p "$cache.tmp"
cd "$here"
export GOFLAGS=-mod=mod
major=${k8s_version#v}; major=${major%%.*}
minor=$(cut -d. -f2 <<<"${k8s_version#v}")
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${k8s_version} -X k8s.io/component-base/version.gitMajor=${major} -X k8s.io/component-base/version.gitMinor=${minor}"
start=$(date +%s)
[[ -x $cache.tmp/kube-apiserver ]] || go build -p 2 -trimpath -ldflags "$ldflags" -o "$cache.tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver >&2
[[ -x $cache.tmp/etcd ]] || go build -p 2 -trimpath -ldflags "-s -w" -o "$cache.tmp/etcd" go.etcd.io/etcd/server/v3 >&2
if [[ -n $want_kubectl && ! -x $cache.tmp/kubectl ]]; then
  go build -p 2 -trimpath -ldflags "$ldflags" -o "$cache.tmp/kubectl" k8s.io/kubernetes/cmd/kubectl >&2
fi
rm -rf "$cache" && mv "$cache.tmp" "$cache"
echo "built the control plane (kubernetes ${k8s_version}, etcd ${etcd_version}) in $(( $(date +%s) - start ))s" >&2
echo "$cache"
