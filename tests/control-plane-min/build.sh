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
# The build itself is tests/control-plane/build.sh's, pointed at this module.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
EDGEGATE_CONTROL_PLANE_MODULE=$here exec "$here/../control-plane/build.sh" "$@"
