#!/usr/bin/env bash
# Certificate rotation under load (loopback, bounded): wrk keeps 64 keep-alive connections busy on
# /validate for SECONDS (default 10); a third of the way in, the certificate files are replaced by
# a leaf from a new CA. Reports wrk's errors (must be 0) and how long until a new connection is
# shown the new leaf (must be under 1 s); exits 1 when either is missed. Needs wrk and openssl.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
. scripts/webhook.sh
certs/dev-certs.sh "$work/old" >/dev/null
certs/dev-certs.sh "$work/new" >/dev/null
mkdir -p "$work/serving"
cp "$work/old/tls.crt" "$work/old/tls.key" "$work/serving/"
cp examples/records/edgereachability.yaml "$work/records/"
serve "$work/old/ca.crt" "$webhook" --listen "127.0.0.1:$port" \
  --tls-cert "$work/serving/tls.crt" --tls-key "$work/serving/tls.key" --records-dir "$work/records"
issuer() { openssl s_client -connect "127.0.0.1:$port" -servername localhost </dev/null 2>/dev/null | openssl x509 -noout -issuer; }
want=$(openssl x509 -noout -issuer -in "$work/new/tls.crt")
wrk -t2 -c64 -d"${secs}s" -s scripts/load.lua "https://127.0.0.1:$port/validate" >"$work/wrk.txt" 2>&1 &
wrk_pid=$!
sleep "$(python3 -c "print($secs / 3)")"
start=$(date +%s.%N)
for f in tls.key tls.crt; do cp "$work/new/$f" "$work/serving/$f.new" && mv "$work/serving/$f.new" "$work/serving/$f"; done
seen=""
for _ in $(seq 300); do [ "$(issuer)" = "$want" ] && { seen=1; break; }; sleep 0.02; done
took=$(python3 -c "print(f'{$(date +%s.%N) - $start:.2f}')")
wait "$wrk_pid"
grep RESULT "$work/wrk.txt"
grep -E 'Socket errors|Non-2xx' "$work/wrk.txt" || echo "no socket errors, no non-2xx responses"
[ -n "$seen" ] || { echo "rotation-under-load.sh: new leaf not served to new connections after ${took} s, goal under 1 s" >&2; exit 1; }
echo "new leaf served to new connections after ${took}s"
fail=0
errors=$(awk '/^RESULT/ { for (i = 1; i <= NF; i++) if ($i ~ /^errors=/) print substr($i, 8) }' "$work/wrk.txt")
[ "${errors:-missing}" = 0 ] || { echo "rotation-under-load.sh: ${errors:-missing} failed requests, goal 0" >&2; fail=1; }
awk -v v="$took" 'BEGIN { exit !(v + 0 < 1) }' ||
  { echo "rotation-under-load.sh: new leaf served after ${took} s, over the goal of under 1 s" >&2; fail=1; }
exit "$fail"
