#!/usr/bin/env bash
# The README's test command as a newcomer runs it: a fresh clone of a commit, every cache empty
# (CARGO_HOME, GOCACHE, GOMODCACHE and EDGEGATE_CACHE each a new folder), CI=true as .ci/run sets
# it (root-only suites fail instead of skipping). Prints the total, the compile time and each
# test binary's time, longest first; exits 1 when a test fails or the run takes over the goal
# (45 minutes), 2 when it could not start.
#
#   scripts/cold-run.sh [--rev REV] [--dir DIR]
#
# Defaults: HEAD of this clone, /tmp/edgegate-cold. DIR (new, or an earlier run's) is emptied
# first and holds the clone, the caches and run.log. Run it alone on the machine: anything beside
# it lengthens the figure.
# Needs what the README lists (go, kubectl, openssl, curl, iproute2, libfaketime) and root.
set -uo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
rev=HEAD
dir=/tmp/edgegate-cold
goal=2700
while [ $# -gt 0 ]; do
  case "$1" in
    --rev) rev="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    *) echo "usage: $0 [--rev REV] [--dir DIR]" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "cold-run: needs root (the network-namespace and image suites)" >&2; exit 2; }
commit=$(git -C "$repo" rev-parse --verify "$rev^{commit}") || exit 2
# DIR is emptied: refuse one that holds anything but an earlier run's clone, caches and log.
if [ -d "$dir" ] && [ -n "$(ls -A "$dir")" ] && [ ! -f "$dir/run.log" ] && [ ! -d "$dir/src/.git" ]; then
  echo "cold-run: $dir is not empty and not an earlier cold run's; name another with --dir" >&2
  exit 2
fi
rm -rf "$dir" && mkdir -p "$dir/cache" || exit 2
git clone -q --no-checkout "$repo" "$dir/src" && git -C "$dir/src" checkout -q "$commit" || exit 2
export CARGO_HOME="$dir/cache/cargo" GOCACHE="$dir/cache/go-build" GOMODCACHE="$dir/cache/gomod" \
  EDGEGATE_CACHE="$dir/cache/edgegate" CI=true
echo "cold-run: commit $commit in $dir/src"
started=$(date +%s)
# Each line stamped with the second it was read, so each test binary's time includes the Go
# builds it waited for.
(cd "$dir/src" && cargo test --workspace --locked 2>&1) |
  while IFS= read -r line; do printf '%(%s)T %s\n' -1 "$line"; done >"$dir/run.log"
rc=${PIPESTATUS[0]}
took=$(($(date +%s) - started))
python3 - "$dir/run.log" "$started" <<'EOF'
import re, sys
lines = open(sys.argv[1]).read().splitlines()
started = int(sys.argv[2])
times, current, first, passed, failed, ignored = [], None, None, 0, 0, 0
for line in lines:
    stamp, _, text = line.partition(" ")
    m = re.match(r"\s*(Running|Doc-tests) (\S+)", text)
    if m:
        current, since = m.group(2), int(stamp)
        first = first or since
    m = re.match(r"test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored", text)
    if m and current:
        passed, failed, ignored = passed + int(m.group(1)), failed + int(m.group(2)), ignored + int(m.group(3))
        times.append((int(stamp) - since, current))
        current = None
print(f"cold-run: {passed} passed, {failed} failed, {ignored} ignored; compiling {(first or started) - started} s, test binaries {sum(t for t, _ in times)} s")
for took, name in sorted(times, reverse=True):
    if took >= 10:
        print(f"cold-run: {took:5d} s {name}")
EOF
echo "cold-run: total $took s (goal under $goal s), cargo test exited $rc; log $dir/run.log"
[ "$rc" = 0 ] || exit 1
[ "$took" -lt "$goal" ] || { echo "cold-run: over the goal" >&2; exit 1; }
