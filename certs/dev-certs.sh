#!/usr/bin/env bash
# Make a dev CA and a serving certificate for edgegate-webhook with openssl.
#
#   certs/dev-certs.sh OUT_DIR [EXTRA_SAN ...]
#
# Writes OUT_DIR/ca.crt, ca.key, tls.crt, tls.key. The serving certificate names the in-cluster
# Service (edgegate-webhook.edgegate-system.svc and .svc.cluster.local), localhost, 127.0.0.1 and
# ::1, plus any EXTRA_SAN (a DNS name or an IP address). An existing ca.crt/ca.key in OUT_DIR is
# reused, so running it again issues a new leaf from the same CA; delete them for a new CA.
set -euo pipefail
out=${1:?usage: certs/dev-certs.sh OUT_DIR [EXTRA_SAN ...]}
shift
service=${EDGEGATE_SERVICE:-edgegate-webhook}
namespace=${EDGEGATE_NAMESPACE:-edgegate-system}
days=${EDGEGATE_CERT_DAYS:-365}
mkdir -p "$out"
umask 077

sans="DNS:${service}.${namespace}.svc,DNS:${service}.${namespace}.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:::1"
for san in "$@"; do
  if [[ $san =~ ^[0-9.]+$ || $san == *:* ]]; then sans="$sans,IP:$san"; else sans="$sans,DNS:$san"; fi
done

if [[ ! -s $out/ca.crt || ! -s $out/ca.key ]]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 -days 3650 \
    -subj "/CN=edgegate dev CA $(date +%s%N)" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -keyout "$out/ca.key" -out "$out/ca.crt" 2>/dev/null
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 \
  -subj "/CN=${service}.${namespace}.svc" -keyout "$tmp/tls.key" -out "$tmp/tls.csr" 2>/dev/null
printf 'subjectAltName=%s\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n' "$sans" >"$tmp/ext"
openssl x509 -req -in "$tmp/tls.csr" -CA "$out/ca.crt" -CAkey "$out/ca.key" -CAcreateserial \
  -days "$days" -sha256 -extfile "$tmp/ext" -out "$tmp/tls.crt" 2>/dev/null
# Replace key and certificate by rename, so a reader never sees half a file.
mv "$tmp/tls.key" "$out/tls.key.new" && mv "$tmp/tls.crt" "$out/tls.crt.new"
mv "$out/tls.key.new" "$out/tls.key" && mv "$out/tls.crt.new" "$out/tls.crt"
rm -f "$out/ca.srl"
chmod 644 "$out/ca.crt" "$out/tls.crt"
echo "wrote $out/ca.crt $out/tls.crt $out/tls.key (SANs: $sans)"
