#!/usr/bin/env bash
# The TLS connections the hub's API server keeps to the webhook across its pauses, and what a new
# one costs it (tests/system/tests/vs_policy.rs, webhook_connections_across_pauses): the webhook
# replica as installed, called through deploy/'s Service reference (HTTP/1.1, as on a hub), bursts
# of VS_BURST creates VS_PAUSE_SECONDS apart (15 s). Prints new connections and API server CPU
# per create for each burst. Needs root (the network namespace); about two minutes. Exits 1 when
# the connections do not stay across the pauses (over 3 new ones a burst on average; the doc's
# bursts opened 0-3, a handshake per pooled connection 9-16), 2 when it could not measure.
#
#   scripts/keepalive.sh
#   EDGEGATE_WEBHOOK_RELEASE=/path/to/old/edgegate-webhook scripts/keepalive.sh   another build
set -euo pipefail
cd "$(dirname "$0")/.."
tests/control-plane/build.sh >/dev/null
cargo build --release --locked --workspace --quiet
restore=""
out=$(mktemp)
if [ -n "${EDGEGATE_WEBHOOK_RELEASE:-}" ]; then
  cp target/release/edgegate-webhook target/release/edgegate-webhook.kept
  restore=1
  cp "$EDGEGATE_WEBHOOK_RELEASE" target/release/edgegate-webhook
fi
trap 'rm -f "$out"; [ -n "$restore" ] && mv target/release/edgegate-webhook.kept target/release/edgegate-webhook' EXIT
cargo test --release --locked -p edgegate-system-tests --test vs_policy -- --ignored --nocapture webhook_connections_across_pauses 2>&1 |
  awk '/^vs:|^skipped|test result/ { print } /panicked/ { print; getline; print }' | tee "$out"
if grep -q '^skipped' "$out"; then
  echo "keepalive.sh: could not measure (the webhook's network namespace needs root)" >&2
  exit 2
fi
opens=$(awk '/^vs: after pauses/ { for (i = 1; i < NF; i++) if ($(i + 1) == "new") print $i }' "$out")
awk -v v="$opens" 'BEGIN { exit !(v != "" && v + 0 <= 3) }' ||
  { echo "keepalive.sh: ${opens:-no} new connections per burst after pauses, over 3: the connections did not stay across the pauses" >&2; exit 1; }
