#!/usr/bin/env bash
# RSS of edgegate-webhook (release build) holding 1,000,000 record addresses from files:
# 123 namespaces × 8,130 addresses (under the 8,192 per-record limit), IPv6, one file per record.
#
#   scripts/rss.sh [ADDRESSES]
set -euo pipefail
cd "$(dirname "$0")/.."
total=${1:-1000000}
cargo build -q --release -p edgegate-webhook
work=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; rm -rf "$work"' EXIT
python3 - "$work/records" "$total" <<'PY'
import os, sys
out, total = sys.argv[1], int(sys.argv[2])
os.makedirs(out)
per, ns = 8130, 0
while total > 0:
    n = min(per, total)
    with open(f"{out}/ns-{ns}.yaml", "w") as f:
        f.write(f"apiVersion: networking.datumapis.com/v1alpha\nkind: EdgeReachability\n"
                f"metadata: {{name: default, namespace: ns-{ns}}}\nspec:\n  addresses:\n")
        for i in range(n):
            f.write(f"  - fd{ns % 256:02x}:{ns // 256:x}:2::{i >> 16:x}:{i & 0xffff:x}\n")
    total -= n
    ns += 1
PY
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
start=$(date +%s.%N)
RUST_LOG=warn target/release/edgegate-webhook --listen "127.0.0.1:$port" --self-signed "$work/tls" --records-dir "$work/records" >/dev/null &
pid=$!
until curl -sf --cacert "$work/tls/ca.crt" "https://localhost:$port/readyz" >/dev/null 2>&1; do sleep 0.1; done
ready=$(python3 -c "print(f'{$(date +%s.%N) - $start:.1f}')")
sleep 2
addresses=$(curl -s --cacert "$work/tls/ca.crt" "https://localhost:$port/metrics" | awk '/^edgegate_record_addresses /{print $2}')
rss_kib=$(awk '/VmRSS/{print $2}' "/proc/$pid/status")
hwm_kib=$(awk '/VmHWM/{print $2}' "/proc/$pid/status")
echo "addresses=$addresses ready_after_s=$ready rss_mib=$((rss_kib / 1024)) peak_rss_mib=$((hwm_kib / 1024))"
