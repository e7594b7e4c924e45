#!/usr/bin/env bash
# Soak (loopback, bounded): the release webhook holding 1,000,000 record addresses serves /validate
# at half its measured peak for SECONDS (default 600), in 60 s slices; reports RSS and p99 per
# slice, and RSS drift from the first to the last slice. Needs wrk.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-600}
slice=$(( secs < 60 ? secs : 60 ))
cargo build -q --release -p edgegate-webhook
work=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; rm -rf "$work"' EXIT
python3 - "$work/records" <<'PY'
import os, sys
out = sys.argv[1]; os.makedirs(out); total, ns = 1_000_000, 0
while total > 0:
    n = min(8130, total)
    with open(f"{out}/ns-{ns}.yaml", "w") as f:
        f.write(f"apiVersion: networking.datumapis.com/v1alpha\nkind: EdgeReachability\nmetadata: {{name: default, namespace: ns-{ns}}}\nspec:\n  addresses:\n")
        f.writelines(f"  - fd{ns % 256:02x}:{ns // 256:x}:2::{i >> 16:x}:{i & 0xffff:x}\n" for i in range(n))
    total -= n; ns += 1
PY
cp examples/records/edgereachability.yaml "$work/records/"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
RUST_LOG=warn,rustls=error target/release/edgegate-webhook --listen "127.0.0.1:$port" --self-signed "$work/tls" --records-dir "$work/records" >/dev/null &
pid=$!
until curl -sf --cacert "$work/tls/ca.crt" "https://localhost:$port/readyz" >/dev/null 2>&1; do sleep 0.2; done
peak=$(wrk -t2 -c64 -d5s -s scripts/load.lua "https://127.0.0.1:$port/validate" | sed -nE 's/.*rps=([0-9]+).*/\1/p')
rate=$(( peak / 2 ))
echo "peak ${peak}/s; soaking at ${rate}/s for ${secs}s"
rss() { awk '/VmRSS/{print $2}' "/proc/$pid/status"; }
first="" last=""
for _ in $(seq $(( secs / slice ))); do
  line=$(EDGEGATE_RATE=$rate EDGEGATE_CONNECTIONS=64 wrk -t2 -c64 -d"${slice}s" -s scripts/load.lua "https://127.0.0.1:$port/validate" | grep RESULT)
  r=$(rss); first=${first:-$r}; last=$r
  echo "rss_kib=$r $line"
done
python3 -c "print(f'RSS drift first→last slice: {($last - $first) / $first:+.1%}')"
