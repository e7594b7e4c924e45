#!/usr/bin/env bash
# Build kube-apiserver and etcd from their Go modules (through the Go module proxy) into a cache
# outside the repo, keyed by version, so a second run is instant.
#
#   tests/control-plane/build.sh            prints the directory holding kube-apiserver and etcd
#   tests/control-plane/build.sh EXTRA...   also builds each EXTRA there: kubectl (for machines
#                                           without one), kube-controller-manager (for tests that
#                                           need namespace deletion or garbage collection)
#
# Kubernetes' own module requires its staging modules at v0.0.0 and maps them to ./staging, which
# only works inside its repository; go.mod beside this script replaces each with its published
# v0.<minor>.<patch>. The etcd server module is built from the same module graph.
#
# Safe to start several times at once (tests do): one build runs under a lock, the others wait for
# it and then find the cache filled. Each binary is built beside its final name and renamed into
# place, so a cache from before an EXTRA existed just gains it, and a reader never sees half a file.
#
# EDGEGATE_CONTROL_PLANE_MODULE names another wrapper module to build from (the oldest supported
# version's, tests/control-plane-min); its binaries are cached by its own versions.
set -euo pipefail
here=${EDGEGATE_CONTROL_PLANE_MODULE:-$(cd "$(dirname "$0")" && pwd)}
k8s_version=$(awk '$1 == "k8s.io/kubernetes" {print $2}' "$here/go.mod")
etcd_version=$(awk '$1 == "go.etcd.io/etcd/server/v3" {print $2}' "$here/go.mod")
cache=${EDGEGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/edgegate}/control-plane/${k8s_version}-etcd-${etcd_version}
wanted=(kube-apiserver etcd)
for extra in "$@"; do
  case $extra in
    kubectl | kube-controller-manager) wanted+=("$extra") ;;
    *) echo "build.sh: unknown binary '$extra' (kubectl, kube-controller-manager)" >&2; exit 2 ;;
  esac
done
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
