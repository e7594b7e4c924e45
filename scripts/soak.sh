#!/usr/bin/env bash
# Soak (loopback, bounded): the release webhook holding 1,000,000 record addresses serves /validate
# at half its measured peak for SECONDS (default 600), in 60 s slices; reports RSS and p99 per
# slice, and RSS drift from the first to the last slice. Needs wrk. Exits 1 when a slice's p99 is
# over 2 ms (docs/performance.md's target) or it had errors, or RSS drifted over +10 %.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-600}
slice=$(( secs < 60 ? secs : 60 ))
. scripts/webhook.sh
many_records "$work/records" 1000000
cp examples/records/edgereachability.yaml "$work/records/"
serve "$work/tls/ca.crt" "$webhook" --listen "127.0.0.1:$port" --self-signed "$work/tls" --records-dir "$work/records"
peak=$(wrk -t2 -c64 -d5s -s scripts/load.lua "https://127.0.0.1:$port/validate" | sed -nE 's/.*rps=([0-9]+).*/\1/p')
rate=$(( peak / 2 ))
echo "peak ${peak}/s; soaking at ${rate}/s for ${secs}s"
rss() { awk '/VmRSS/{print $2}' "/proc/$pid/status"; }
first="" last="" fail=0
miss() { echo "soak.sh: $*" >&2; fail=1; }
for _ in $(seq $(( secs / slice ))); do
  line=$(EDGEGATE_RATE=$rate EDGEGATE_CONNECTIONS=64 wrk -t2 -c64 -d"${slice}s" -s scripts/load.lua "https://127.0.0.1:$port/validate" | grep RESULT)
  r=$(rss); first=${first:-$r}; last=$r
  echo "rss_kib=$r $line"
  p99=$(awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^p99_ms=/) print substr($i, 8) }' <<<"$line")
  errors=$(awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^errors=/) print substr($i, 8) }' <<<"$line")
  awk -v v="$p99" 'BEGIN { exit !(v != "" && v + 0 <= 2) }' || miss "p99 ${p99:-missing} ms in a slice, over the target of 2 ms"
  [ "${errors:-missing}" = 0 ] || miss "${errors:-missing} errors in a slice, not 0"
done
python3 -c "print(f'RSS drift first→last slice: {($last - $first) / $first:+.1%}')"
drift=$(awk -v a="$first" -v b="$last" 'BEGIN { printf "%+.1f", (a + 0 > 0 ? 100 * (b - a) / a : 0) }')
awk -v v="$drift" 'BEGIN { exit !(v + 0 <= 10) }' || miss "RSS drift ${drift} % first→last slice, over +10 %"
exit "$fail"
