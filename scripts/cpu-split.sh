#!/usr/bin/env bash
# The webhook's own CPU per request, with the load generator kept off its core: edgegate-webhook
# (release build, one Tokio worker) pinned to CPU 0, a one-thread wrk to CPU 1, 64 HTTPS
# keep-alive connections. Prints, for /ceiling (fixed allow, body read but not parsed),
# /ceiling/tokenised (the same after JSON-tokenising the body, building nothing: the floor of
# any decode) and /validate (the typical copy review), requests/s and the server's user+system
# CPU per request from /proc/PID/stat, then each cost's ratio to the ceiling's: what it can reach
# of the ceiling on a machine where the load generator costs the server nothing.
#
#   scripts/cpu-split.sh [SECONDS]      (default 6 per run; the three paths, twice each)
#
# Needs wrk (apt-get install wrk), taskset (util-linux) and two CPUs. Loopback only. Exits 1 when
# /validate reaches under 80 % of the ceiling in both rounds (the target, docs/performance.md).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-6}
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install -y wrk" >&2; exit 1; }
[ "$(nproc)" -ge 2 ] || { echo "needs two CPUs" >&2; exit 1; }
. scripts/webhook.sh
cp examples/records/edgereachability.yaml "$work/records/"
TOKIO_WORKER_THREADS=1 serve "$work/tls/ca.crt" taskset -c 0 "$ceiling" \
  --listen "127.0.0.1:$port" --self-signed "$work/tls" --records-dir "$work/records"

cpu_ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
run() { # path -> "rps us_per_request"
  local before after out
  before=$(cpu_ticks)
  out=$(taskset -c 1 wrk -t1 -c64 -d"${secs}s" -s scripts/load.lua "https://127.0.0.1:$port$1" | grep RESULT)
  after=$(cpu_ticks)
  python3 - "$out" "$before" "$after" "$(getconf CLK_TCK)" <<'PY'
import re, sys
out, before, after, tick = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
requests = int(re.search(r"requests=(\d+)", out).group(1))
rps = re.search(r"rps=(\d+)", out).group(1)
print(rps, f"{(after - before) / tick * 1e6 / requests:.2f}")
PY
}
best=0
for round in 1 2; do
  read -r c_rps c_us < <(run /ceiling)
  read -r t_rps t_us < <(run /ceiling/tokenised)
  read -r v_rps v_us < <(run /validate)
  python3 - "$round" "$c_rps" "$c_us" "$t_rps" "$t_us" "$v_rps" "$v_us" <<'PY'
import sys
r, c_rps, c_us, t_rps, t_us, v_rps, v_us = sys.argv[1:]
c, t, v = float(c_us), float(t_us), float(v_us)
print(f"round {r}: ceiling {c_rps}/s {c:.2f} us/request; "
      f"tokenised {t_rps}/s {t:.2f} us/request ({c / t:.1%} of ceiling); "
      f"validate {v_rps}/s {v:.2f} us/request ({c / v:.1%} of ceiling)")
PY
  best=$(awk -v b="$best" -v c="$c_us" -v v="$v_us" 'BEGIN { r = (v + 0 > 0 ? 100 * c / v : 0); printf "%.1f", (r > b + 0 ? r : b) }')
done
awk -v v="$best" 'BEGIN { exit !(v + 0 >= 80) }' ||
  { echo "cpu-split.sh: validate at ${best} % of the ceiling (the better round), under the target of 80 %" >&2; exit 1; }
