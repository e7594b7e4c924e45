# Sourced by the loopback scripts (load, cpu-split, soak, rss, rotation-under-load), so that each
# says only what it measures. Builds the release webhook (and its ceiling example) and sets:
#   $webhook   the binary
#   $ceiling   the webhook plus POST /ceiling and /ceiling/tokenised (webhook/examples/ceiling.rs)
#   $work      a scratch directory, removed on exit, with records/ in it (empty)
#   $port      a free loopback port
#   serve CA COMMAND...      start COMMAND (the webhook, maybe wrapped) in the background as $pid,
#                            and return once /readyz answers over TLS verified by CA (60 s at most)
#   many_records DIR TOTAL   write TOTAL IPv6 record addresses, 8,130 to a namespace (under the
#                            8,192 per-record limit), one EdgeReachability file per namespace
cargo build -q --release -p edgegate-webhook --bins --example ceiling
webhook=target/release/edgegate-webhook
ceiling=target/release/examples/ceiling
work=$(mktemp -d)
pid=
trap 'kill $pid 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/records"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export RUST_LOG=${RUST_LOG:-warn,rustls=error}

serve() {
  local ca=$1
  shift
  "$@" >/dev/null &
  pid=$!
  for _ in $(seq 600); do
    curl -sf --cacert "$ca" "https://localhost:$port/readyz" >/dev/null 2>&1 && return
    sleep 0.1
  done
  echo "the webhook was not ready within 60 s" >&2
  exit 1
}

many_records() {
  python3 - "$1" "$2" <<'PY'
import os, sys
out, total = sys.argv[1], int(sys.argv[2])
os.makedirs(out, exist_ok=True)
ns = 0
while total > 0:
    n = min(8130, total)
    with open(f"{out}/ns-{ns}.yaml", "w") as f:
        f.write(f"apiVersion: networking.datumapis.com/v1alpha\nkind: EdgeReachability\n"
                f"metadata: {{name: default, namespace: ns-{ns}}}\nspec:\n  addresses:\n")
        f.writelines(f"  - fd{ns % 256:02x}:{ns // 256:x}:2::{i >> 16:x}:{i & 0xffff:x}\n" for i in range(n))
    total -= n
    ns += 1
PY
}
