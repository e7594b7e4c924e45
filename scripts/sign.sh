#!/usr/bin/env bash
# Sign a release (scripts/release.sh runs this): push the image index from its OCI layout to a
# registry served on loopback (crane registry serve), sign it there with cosign and the release
# key, run the `cosign verify` docs/from-source.md gives operators, and see cosign refuse a
# tampered image that carries the genuine signature; sign each FILE (the SBOMs) with the same key
# (sign-blob), verify each, and see a tampered copy refused. The transparency log is off (Rekor
# cannot be reached from here): a signature is checked against the public key alone.
#
#   scripts/sign.sh --out DIR --version VERSION --layout DIR --digest sha256:... [--key FILE] FILE...
#
# --key: the release's cosign private key, its password in COSIGN_PASSWORD; without it a key pair
# is made for this run. Writes into --out each FILE's FILE.sig and edgegate-VERSION-cosign.pub,
# and prints their paths, one a line. cosign and crane are built into the cache
# (tests/cosign/build.sh, tests/crane/build.sh).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out= version= layout= digest= key=
files=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --out) out=$2; shift 2 ;;
    --version) version=$2; shift 2 ;;
    --layout) layout=$2; shift 2 ;;
    --digest) digest=$2; shift 2 ;;
    --key) key=$2; shift 2 ;;
    -*) echo "sign.sh: unknown argument $1" >&2; exit 2 ;;
    *) files+=("$1"); shift ;;
  esac
done
[[ -d $out && -n $version && -f $layout/index.json && $digest == sha256:* ]] ||
  { echo "usage: scripts/sign.sh --out DIR --version VERSION --layout DIR --digest sha256:... [--key FILE] FILE..." >&2; exit 2; }
cosign=$("$repo/tests/cosign/build.sh")
crane=$("$repo/tests/crane/build.sh")
work=$(mktemp -d "${TMPDIR:-/tmp}/edgegate-sign.XXXXXX")
registry_pid=
cleanup() {
  [[ -z $registry_pid ]] || kill "$registry_pid" 2>/dev/null || true
  [[ -n ${EDGEGATE_KEEP:-} ]] && echo "kept $work" >&2 || rm -rf "$work"
}
trap cleanup EXIT

# The key: the release's, or one made for this run (its password empty).
if [[ -z $key ]]; then
  (cd "$work" && COSIGN_PASSWORD= "$cosign" generate-key-pair --output-key-prefix release >/dev/null 2>&1)
  key=$work/release.key
  export COSIGN_PASSWORD=
  cp "$work/release.pub" "$work/pub"
else
  "$cosign" public-key --key "$key" --outfile "$work/pub" >/dev/null 2>&1 ||
    { echo "sign.sh: cosign cannot read $key (is COSIGN_PASSWORD its password?)" >&2; exit 1; }
fi
pub=$out/edgegate-$version-cosign.pub
cp "$work/pub" "$pub"
export COSIGN_YES=true # no prompts: the transparency log is off on purpose

# A registry on loopback, in memory, on a free port.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$crane" registry serve --address "127.0.0.1:$port" >"$work/registry.log" 2>&1 &
registry_pid=$!
for _ in $(seq 50); do
  curl -fsS "http://127.0.0.1:$port/v2/" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fsS "http://127.0.0.1:$port/v2/" >/dev/null || { echo "sign.sh: the loopback registry did not start: $(cat "$work/registry.log")" >&2; exit 1; }
repository=127.0.0.1:$port/edgegate
"$crane" push --index "$layout" "$repository:v$version" >/dev/null 2>"$work/push.log" ||
  { echo "sign.sh: crane push --index: $(cat "$work/push.log")" >&2; exit 1; }
pushed=$("$crane" digest "$repository:v$version")
[[ $pushed == "$digest" ]] || { echo "sign.sh: the registry holds $pushed, not $digest" >&2; exit 1; }

registry=(--allow-http-registry)
"$cosign" sign --key "$key" --tlog-upload=false --recursive "${registry[@]}" "$repository@$digest" >"$work/sign.log" 2>&1 ||
  { echo "sign.sh: cosign sign: $(cat "$work/sign.log")" >&2; exit 1; }
# The operator's check (docs/from-source.md), against this registry.
verify() { "$cosign" verify --key "$pub" --insecure-ignore-tlog=true "${registry[@]}" "$1" >"$work/verify.log" 2>&1; }
verify "$repository@$digest" || { echo "sign.sh: cosign verify refused the signed image: $(cat "$work/verify.log")" >&2; exit 1; }
echo "signed and verified $repository@$digest (cosign, transparency log off)" >&2

# Tampered: the first platform's image with one label more, carrying the genuine signature.
first=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"])' "$layout/index.json")
tampered=$("$crane" mutate --label org.example.tampered=true -t "$repository:tampered" "$repository@$first" 2>"$work/mutate.log" | sed 's/.*@//') ||
  { echo "sign.sh: crane mutate: $(cat "$work/mutate.log")" >&2; exit 1; }
[[ $tampered == sha256:* && $tampered != "$first" ]] || { echo "sign.sh: crane mutate gave '$tampered'" >&2; exit 1; }
"$crane" copy "$repository:sha256-${digest#sha256:}.sig" "$repository:sha256-${tampered#sha256:}.sig" >/dev/null 2>&1 ||
  { echo "sign.sh: could not copy the signature to the tampered image" >&2; exit 1; }
if verify "$repository@$tampered"; then
  echo "sign.sh: cosign verify accepted a tampered image ($tampered) carrying the genuine signature" >&2
  exit 1
fi
# Refused for the signature, not for anything else (cosign also warns that sigstore's TUF root
# cannot be fetched from here: not needed with a key).
grep -q "no matching signatures" "$work/verify.log" ||
  { echo "sign.sh: cosign verify refused the tampered image, but not for its signature: $(cat "$work/verify.log")" >&2; exit 1; }
echo "refused a tampered image carrying the genuine signature: $(grep -m1 "no matching signatures" "$work/verify.log")" >&2

# The files (SBOMs): signed, verified, and a tampered copy refused.
for f in "${files[@]}"; do
  sig=$out/$(basename "$f").sig
  "$cosign" sign-blob --key "$key" --tlog-upload=false --output-signature "$sig" "$f" >"$work/blob.log" 2>&1 ||
    { echo "sign.sh: cosign sign-blob $f: $(cat "$work/blob.log")" >&2; exit 1; }
  verify_blob() { "$cosign" verify-blob --key "$pub" --insecure-ignore-tlog=true --signature "$sig" "$1" >"$work/blob.log" 2>&1; }
  verify_blob "$f" || { echo "sign.sh: cosign verify-blob refused $f: $(cat "$work/blob.log")" >&2; exit 1; }
  cp "$f" "$work/tampered" && echo " " >>"$work/tampered"
  if verify_blob "$work/tampered"; then
    echo "sign.sh: cosign verify-blob accepted a tampered $(basename "$f")" >&2
    exit 1
  fi
  grep -q "invalid signature" "$work/blob.log" ||
    { echo "sign.sh: cosign verify-blob refused a tampered $(basename "$f"), but not for its signature: $(cat "$work/blob.log")" >&2; exit 1; }
  echo "$sig"
done
echo "signed and verified ${#files[@]} files; a tampered copy of each refused" >&2
echo "$pub"
