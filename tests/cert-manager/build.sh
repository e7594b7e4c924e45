#!/usr/bin/env bash
# Build cert-manager's controllers and CA injector (main.go beside this script, one binary) from the
# cert-manager Go module (through the Go module proxy) into a cache outside the repo, keyed by
# version, and put cert-manager's CRDs beside it. Prints the directory:
#
#   DIR/cert-manager   the binary: cert-manager --kubeconfig FILE [--namespace NS] (see main.go)
#   DIR/crds/*.yaml    CustomResourceDefinitions: certificates, certificaterequests, issuers,
#                      clusterissuers (cert-manager.io) and orders, challenges (acme.cert-manager.io)
#
# The CRDs come from the module's deploy/crds: plain controller-gen output (the Helm chart's
# deploy/charts/cert-manager/templates/crd-*.yaml are the same objects wrapped in template
# expressions, for labels and helm.sh/resource-policy only).
#
# cert-manager's admission webhook is internal to the module and does not run here: Certificates
# and Issuers get no defaulting or validation beyond the CRD schemas, so write complete objects.
#
# A cache built from other sources (main.go, go.mod, go.sum changed) is rebuilt. Safe to start
# several times at once: one build runs under a lock, the others wait for it and then find it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=$(awk '{for (i = 1; i < NF; i++) if ($i == "github.com/cert-manager/cert-manager") print $(i + 1)}' "$here/go.mod" | head -1)
cache=${EDGEGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/edgegate}/cert-manager/${version}
sources=$(cd "$here" && cat main.go go.mod go.sum | sha256sum | cut -d' ' -f1)
crds=(cert-manager.io_certificates cert-manager.io_certificaterequests cert-manager.io_issuers
  cert-manager.io_clusterissuers acme.cert-manager.io_orders acme.cert-manager.io_challenges)
ready() {
  [[ -x $cache/cert-manager && $(cat "$cache/sources.sha256" 2>/dev/null) == "$sources" ]] || return 1
  local crd
  for crd in "${crds[@]}"; do [[ -s $cache/crds/$crd.yaml ]] || return 1; done
}
if ready; then
  echo "$cache"
  exit 0
fi
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if ready; then # built by whoever held the lock before us
  echo "$cache"
  exit 0
fi
cd "$here"
export GOFLAGS=-mod=mod
start=$(date +%s)
module_dir=$(go list -m -f '{{.Dir}}' github.com/cert-manager/cert-manager)
if [[ -z $module_dir || ! -d $module_dir ]]; then
  go mod download github.com/cert-manager/cert-manager
  module_dir=$(go list -m -f '{{.Dir}}' github.com/cert-manager/cert-manager)
fi
rm -rf "$cache/crds.tmp" && mkdir -p "$cache/crds.tmp"
for crd in "${crds[@]}"; do
  src=$module_dir/deploy/crds/$crd.yaml
  if grep -q '{{' "$src"; then
    echo "build.sh: $src holds template expressions; expected plain CRDs" >&2
    exit 1
  fi
  cp "$src" "$cache/crds.tmp/$crd.yaml"
done
chmod -R u+w "$cache/crds.tmp" # the module cache is read-only
rm -rf "$cache/crds" && mv "$cache/crds.tmp" "$cache/crds"
go build -p 2 -trimpath -ldflags "-s -w -X github.com/cert-manager/cert-manager/pkg/util.AppVersion=${version}" \
  -o "$cache/cert-manager.tmp" . >&2
mv "$cache/cert-manager.tmp" "$cache/cert-manager"
echo "$sources" >"$cache/sources.sha256"
echo "built cert-manager ${version} in $(( $(date +%s) - start ))s" >&2
echo "$cache"
