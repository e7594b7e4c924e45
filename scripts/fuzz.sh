#!/usr/bin/env bash
# Fuzz each target for SECONDS (default 60) with cargo-fuzz (libFuzzer; needs the nightly
# toolchain, which rustup has here). New inputs that reach new code are added to
# fuzz/corpus/<target>/ (commit them: tests/fuzz_corpus.rs replays the corpus in CI); a crash is
# written to fuzz/artifacts/<target>/ — copy it into the corpus as its regression test, then fix.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]      targets: review record_file address
#
# Exits 1 when cargo fuzz fails for a target (a crash, a leak, a timeout, or it could not run).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(review record_file address)
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
failed=0
for t in "${targets[@]}"; do
  echo "== $t (${secs}s)"
  if ! cargo +nightly fuzz run "$t" "fuzz/corpus/$t" -- -max_total_time="$secs" -timeout=5 -rss_limit_mb=2048 -print_final_stats=1 2>&1 |
    { grep -E '^(#[0-9]+.*DONE|stat::number_of_executed_units|stat::average_exec_per_sec|==[0-9]+==|SUMMARY)' || true; }; then
    echo "fuzz.sh: $t: cargo fuzz exited ${PIPESTATUS[0]}, the goal is no crash (see fuzz/artifacts/$t/)" >&2
    failed=1
  fi
done
exit "$failed"
