#!/usr/bin/env bash
# Every documented render of deploy/ against a real kube-apiserver of the OLDEST Kubernetes it
# supports (1.30, docs/deploy.md): server-side dry-run apply, strict field validation.
#
#   scripts/min-version.sh              prints OK/FAIL per render, exits 1 if any fails
#   scripts/min-version.sh FILE.yaml... the same for manifests already rendered (a release's,
#                                       scripts/release.sh) instead of its own renders
#   scripts/min-version.sh --newest ... the same against the NEWEST supported version instead (the
#                                       tests' kube-apiserver, tests/control-plane/build.sh)
#
# Builds (or finds in the cache) kube-apiserver and etcd with tests/control-plane-min/build.sh
# (cold: about 15 minutes of Go build on 2 cores; cached by version after that), starts them on
# free loopback ports in a temporary directory with generated certificates (the flags of
# tests/system/src/control_plane.rs), installs stand-in CRDs for cert-manager's Issuer and
# Certificate and the Prometheus Operator's PodMonitor and PrometheusRule (any spec accepted),
# creates namespace edgegate-system, and for each render runs `kubectl kustomize DIR` and
# `kubectl apply --dry-run=server` of the result (strict field validation: an unknown field
# fails). A render also fails when the API server accepts it but drops a field it was sent (what
# a field behind a feature gate that is off on that version would do). The renders: the overlays
# observe, enforce, dev, karmada-hub/hub and karmada-hub/host, and user kustomizations
# (docs/deploy.md's order: features, certificate source, enforce, images) that together use every
# component. deploy/ is copied into the temporary directory, so the dev certificates are made
# there and the repository is untouched.
#
# Uses kubectl from PATH (kustomize built in; EDGEGATE_KUSTOMIZE="kustomize build" as in
# tests/system/tests/deploy.rs), openssl, curl, python3. Everything it starts is stopped on exit;
# EDGEGATE_KEEP=1 keeps the temporary directory (logs, renders, server answers).
set -euo pipefail
started=$(date +%s)
manifests=()
newest=0
if [[ ${1:-} == --newest ]]; then
  newest=1
  shift
fi
for file in "$@"; do
  [[ -f $file ]] || { echo "min-version.sh: $file is not a file" >&2; exit 2; }
  manifests+=("$(cd "$(dirname "$file")" && pwd)/$(basename "$file")")
done
repo=$(cd "$(dirname "$0")/.." && pwd)
kustomize=${EDGEGATE_KUSTOMIZE:-kubectl kustomize}
for tool in kubectl openssl curl python3; do
  command -v "$tool" >/dev/null || { echo "min-version.sh: needs $tool on PATH" >&2; exit 2; }
done

if ((newest)); then
  bin=$("$repo/tests/control-plane/build.sh")
else
  bin=$("$repo/tests/control-plane-min/build.sh")
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/edgegate-min-version.XXXXXX")
pids=()
# Each program runs under a watchdog shell (as in the Rust harness): on TERM it TERMs the program
# and KILLs it three seconds later; it also does so by itself once this script is gone, even
# killed with SIGKILL, so nothing outlives a run.
guarded() { # log program args...
  local log=$1
  shift
  WATCHED=$$ sh -c '"$@" & child=$!
stop() { kill $child 2>/dev/null; for _ in 1 2 3 4 5 6; do kill -0 $child 2>/dev/null || exit 0; sleep 0.5; done; kill -9 $child 2>/dev/null; exit 0; }
trap stop TERM INT
while kill -0 "$WATCHED" 2>/dev/null && kill -0 $child 2>/dev/null; do sleep 0.3; done
stop' watchdog "$@" >"$log" 2>&1 &
  pids+=($!)
}
cleanup() {
  local pid _
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    wait "$pid" 2>/dev/null || true
  done
  if [[ ${EDGEGATE_KEEP:-} == 1 ]]; then echo "kept $tmp" >&2; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Certificates, as the Rust harness makes them: an EC CA, the serving certificate for 127.0.0.1,
# an admin client certificate in system:masters, an RSA key pair for ServiceAccount tokens.
(
  cd "$tmp"
  ec=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256)
  openssl req -x509 "${ec[@]}" -days 2 -subj /CN=edgegate-min-version-ca -keyout ca.key -out ca.crt 2>/dev/null
  issue() { # name subject extensions
    printf '%b' "$3" >"$1.ext"
    openssl req "${ec[@]}" -subj "$2" -keyout "$1.key" -out "$1.csr" 2>/dev/null
    openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile "$1.ext" -out "$1.crt" 2>/dev/null
  }
  issue apiserver /CN=kube-apiserver 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n'
  issue admin /O=system:masters/CN=admin 'extendedKeyUsage=clientAuth\n'
  openssl genrsa -out sa.key 2048 2>/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
)

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
peer=$(free_port) client=$(free_port) secure=$(free_port)

mkdir -p "$tmp/etcd"
guarded "$tmp/etcd.log" "$bin/etcd" \
  --data-dir="$tmp/etcd" \
  --listen-peer-urls="http://127.0.0.1:$peer" --initial-advertise-peer-urls="http://127.0.0.1:$peer" \
  --initial-cluster="default=http://127.0.0.1:$peer" \
  --listen-client-urls="http://127.0.0.1:$client" --advertise-client-urls="http://127.0.0.1:$client" \
  --unsafe-no-fsync=true --log-level=warn
guarded "$tmp/kube-apiserver.log" "$bin/kube-apiserver" \
  --etcd-servers="http://127.0.0.1:$client" \
  --secure-port="$secure" --bind-address=127.0.0.1 \
  --cert-dir="$tmp/apiserver-certs" --tls-cert-file="$tmp/apiserver.crt" --tls-private-key-file="$tmp/apiserver.key" \
  --client-ca-file="$tmp/ca.crt" \
  --service-cluster-ip-range=10.0.0.0/24 --enable-aggregator-routing=true --allow-privileged=true \
  --disable-admission-plugins=ServiceAccount --authorization-mode=RBAC \
  --service-account-issuer="https://127.0.0.1:$secure/" \
  --service-account-key-file="$tmp/sa.pub" --service-account-signing-key-file="$tmp/sa.key" \
  --v=1

kubeconfig=$tmp/admin.kubeconfig
cat >"$kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: cp
  cluster:
    server: https://127.0.0.1:$secure
    certificate-authority: $tmp/ca.crt
users:
- name: admin
  user:
    client-certificate: $tmp/admin.crt
    client-key: $tmp/admin.key
contexts:
- name: admin
  context: {cluster: cp, user: admin}
current-context: admin
EOF
k() { kubectl --kubeconfig "$kubeconfig" --request-timeout=60s "$@"; }

deadline=$(($(date +%s) + 90))
until curl -sf --max-time 2 --cacert "$tmp/ca.crt" --cert "$tmp/admin.crt" --key "$tmp/admin.key" \
  "https://127.0.0.1:$secure/readyz" >/dev/null; do
  for i in 0 1; do
    if ! kill -0 "${pids[$i]}" 2>/dev/null; then
      name=$([[ $i == 0 ]] && echo etcd || echo kube-apiserver)
      echo "min-version.sh: $name exited; log tail:" >&2
      tail -n 30 "$tmp/$name.log" >&2
      exit 1
    fi
  done
  if (($(date +%s) > deadline)); then
    echo "min-version.sh: kube-apiserver not ready within 90s; log tail:" >&2
    tail -n 30 "$tmp/kube-apiserver.log" >&2
    exit 1
  fi
  sleep 0.25
done
echo "control plane ready in $(($(date +%s) - started))s at https://127.0.0.1:$secure (binaries: $bin)"
k version 2>&1 | sed 's/^/  /'

# Stand-ins for the CRDs of cert-manager and the Prometheus Operator: the API server checks the
# rest of each object (metadata, namespace) and accepts any spec.
for crd in cert-manager.io:Issuer:issuers cert-manager.io:Certificate:certificates \
  monitoring.coreos.com:PodMonitor:podmonitors monitoring.coreos.com:PrometheusRule:prometheusrules; do
  IFS=: read -r group kind plural <<<"$crd"
  lower=$(tr '[:upper:]' '[:lower:]' <<<"$kind")
  cat <<EOF
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: $plural.$group}
spec:
  group: $group
  scope: Namespaced
  names: {kind: $kind, listKind: ${kind}List, plural: $plural, singular: $lower}
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
EOF
done >"$tmp/stand-in-crds.yaml"
k apply -f "$tmp/stand-in-crds.yaml" >/dev/null
k wait --for=condition=Established --timeout=60s -f "$tmp/stand-in-crds.yaml" >/dev/null
k create namespace edgegate-system --save-config >/dev/null

# deploy/ copied, so that the dev overlay's certificates are made beside the copy.
mkdir -p "$tmp/src"
cp -a "$repo/deploy" "$tmp/src/deploy"
if [[ ! -s $tmp/src/deploy/components/dev-certs/certs/tls.crt ]]; then
  "$repo/certs/dev-certs.sh" "$tmp/src/deploy/components/dev-certs/certs" >/dev/null
fi

# User kustomizations, in docs/deploy.md's order. Together with the overlays they use every
# component: producer, producer-milo, producer-sharded, karmada-producer-hub and -host,
# monitoring, trim, without-crd, policy, cert-manager, ca-keeper, dev-certs, enforce, images.
user() { # name resources components (space-separated paths under deploy/)
  local dir=$tmp/src/user/$1 p
  mkdir -p "$dir"
  {
    echo "apiVersion: kustomize.config.k8s.io/v1beta1"
    echo "kind: Kustomization"
    echo "resources:"
    for p in $2; do echo "  - ../../deploy/$p"; done
    echo "components:"
    for p in $3; do echo "  - ../../deploy/components/$p"; done
  } >"$dir/kustomization.yaml"
}
user observe-all-features "base" "producer monitoring trim cert-manager images"
user enforce-all-features "base" "producer monitoring trim cert-manager enforce images"
user enforce-without-crd "base" "without-crd cert-manager enforce images"
user dev-certs-trim-producer "base" "producer trim dev-certs enforce images"
user karmada-hub-enforce "overlays/karmada-hub/hub" "enforce"
user karmada-host-enforce "overlays/karmada-hub/host" "enforce"
user karmada-hub-without-crd "overlays/karmada-hub/hub" "without-crd"
user enforce-policy "base" "policy cert-manager enforce images"
user enforce-ca-keeper-trim "base" "trim cert-manager ca-keeper enforce images"
user enforce-producer-sharded "base" "producer producer-milo producer-sharded cert-manager enforce images"
user karmada-producer-hub "overlays/karmada-hub/hub" "karmada-producer-hub enforce"
user karmada-producer-host "overlays/karmada-hub/host" "producer producer-milo karmada-producer-host enforce images"

renders=(
  deploy/overlays/observe
  deploy/overlays/enforce
  deploy/overlays/dev
  deploy/overlays/karmada-hub/hub
  deploy/overlays/karmada-hub/host
  deploy/milo
  deploy/project
  user/observe-all-features
  user/enforce-all-features
  user/enforce-without-crd
  user/dev-certs-trim-producer
  user/karmada-hub-enforce
  user/karmada-host-enforce
  user/karmada-hub-without-crd
  user/enforce-policy
  user/enforce-ca-keeper-trim
  user/enforce-producer-sharded
  user/karmada-producer-hub
  user/karmada-producer-host
)

# Every non-zero leaf the render sent that the server's answer lacks, per object (zero values:
# false, 0, "", {} and [] are left out of answers by omitempty, so they are not compared).
dropped() { # sent.json answer.json
  python3 - "$1" "$2" <<'EOF'
import json, sys
def items(path):  # one List, or objects one after another
    text, at, out = open(path).read(), 0, []
    while text[at:].strip():
        doc, at = json.JSONDecoder().raw_decode(text, at + len(text[at:]) - len(text[at:].lstrip()))
        out += doc.get("items", []) if doc.get("kind") == "List" else [doc]
    return out
def key(o):
    m = o.get("metadata", {})
    return (o.get("apiVersion"), o.get("kind"), m.get("namespace", ""), m.get("name"))
def leaves(v, path=()):
    if isinstance(v, dict) and v:
        for k, x in v.items():
            yield from leaves(x, path + (k,))
    elif isinstance(v, list) and v:
        for i, x in enumerate(v):
            yield from leaves(x, path + (i,))
    elif v not in (None, False, 0, "", {}, []):  # zero values the server may omit (omitempty)
        yield path
def has(v, path):
    for p in path:
        if isinstance(p, int):
            if not isinstance(v, list) or p >= len(v): return False
        elif not isinstance(v, dict) or p not in v: return False
        v = v[p]
    return True
answers = {key(o): o for o in items(sys.argv[2])}
for sent in items(sys.argv[1]):
    k = key(sent)
    got = answers.get(k) or answers.get((k[0], k[1], "edgegate-system", k[3]))
    if got is None:
        print(f"{k[1]} {k[3]}: not in the answer"); continue
    for path in leaves(sent):
        if path[:1] == ("stringData",): continue  # a Secret's stringData becomes data
        if not has(got, path):
            print(f"{k[1]} {k[3]}: ." + ".".join(str(p) for p in path))
EOF
}

((${#manifests[@]} == 0)) || renders=("${manifests[@]}")

failed=0
results=()
for render in "${renders[@]}"; do
  name=${render//\//-}
  out=$tmp/out/$name
  mkdir -p "$out"
  if [[ $render == /* ]]; then # a manifest given on the command line, already rendered
    cp "$render" "$out/rendered.yaml"
  elif ! $kustomize "$tmp/src/$render" >"$out/rendered.yaml" 2>"$out/render.err"; then
    results+=("FAIL $render: kustomize: $(tr '\n' ' ' <"$out/render.err")")
    failed=1
    continue
  fi
  objects=$(grep -c '^kind:' "$out/rendered.yaml" || true)
  if ! k apply --dry-run=server -o json -f "$out/rendered.yaml" >"$out/answer.json" 2>"$out/apply.err"; then
    results+=("FAIL $render ($objects objects): $(grep -v '^Warning:' "$out/apply.err" | tr '\n' ' ')")
    failed=1
    continue
  fi
  # What was sent, as JSON (client-side only: kubectl just converts the YAML).
  k create --dry-run=client -o json -f "$out/rendered.yaml" >"$out/sent.json" 2>"$out/convert.err" || true
  lost=$(dropped "$out/sent.json" "$out/answer.json")
  warnings=$(grep '^Warning:' "$out/apply.err" | sort -u | tr '\n' ' ' || true)
  if [[ -n $lost ]]; then
    results+=("FAIL $render ($objects objects): accepted, but the API server dropped: $(tr '\n' ';' <<<"$lost")")
    failed=1
  else
    results+=("OK   $render ($objects objects)${warnings:+ — $warnings}")
  fi
done

echo
server=$(k version -o json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])')
echo "server-side dry-run on kube-apiserver $server:"
printf '  %s\n' "${results[@]}"
echo "total $(($(date +%s) - started))s"
exit "$failed"
