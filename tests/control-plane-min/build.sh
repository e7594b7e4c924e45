#!/usr/bin/env bash
# Build kube-apiserver and etcd of the OLDEST Kubernetes deploy/ supports (1.30) from their Go
# modules (through the Go module proxy) into the same cache as tests/control-plane/build.sh, keyed by
# version, so a second run is instant.
#
#   tests/control-plane-min/build.sh     prints the directory holding kube-apiserver and etcd
#
# Same scheme as tests/control-plane/: go.mod beside this script requires k8s.io/kubernetes
# v1.30.x and replaces each of its staging modules (required at v0.0.0, mapped to ./staging inside
# Kubernetes' repository) with its published v0.30.x; etcd is the go.etcd.io/etcd/server/v3 that
# Kubernetes 1.30's own go.mod requires, built from the same module graph. The module says
# `go 1.22.0` (what Kubernetes 1.30 was built with), so a newer Go toolchain compiles it with
# 1.22's language and GODEBUG defaults.
#
# Safe to start several times at once: one build runs under a lock, the others wait for it and
# then find the cache filled. Each binary is built beside its final name and renamed into place.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
k8s_version=$(awk '$1 == "k8s.io/kubernetes" {print $2}' "$here/go.mod")
etcd_version=$(awk '$1 == "go.etcd.io/etcd/server/v3" {print $2}' "$here/go.mod")
cache=${EDGEGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/edgegate}/control-plane/${k8s_version}-etcd-${etcd_version}
wanted=(kube-apiserver etcd)
ready() {
  local name
  for name in "${wanted[@]}"; do [[ -x $cache/$name ]] || return 1; done
}
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
mkdir -p "$cache"
cd "$here"
export GOFLAGS=-mod=mod
major=${k8s_version#v}; major=${major%%.*}
minor=$(cut -d. -f2 <<<"${k8s_version#v}")
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${k8s_version} -X k8s.io/component-base/version.gitMajor=${major} -X k8s.io/component-base/version.gitMinor=${minor}"
for name in "${wanted[@]}"; do
  [[ -x $cache/$name ]] && continue
  start=$(date +%s)
  case $name in
    etcd) go build -p 2 -trimpath -ldflags "-s -w" -o "$cache/$name.tmp" go.etcd.io/etcd/server/v3 >&2 ;;
    *) go build -p 2 -trimpath -ldflags "$ldflags" -o "$cache/$name.tmp" "k8s.io/kubernetes/cmd/$name" >&2 ;;
  esac
  mv "$cache/$name.tmp" "$cache/$name"
  echo "built $name (kubernetes ${k8s_version}, etcd ${etcd_version}) in $(( $(date +%s) - start ))s" >&2
done
echo "$cache"
