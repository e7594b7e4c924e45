#!/usr/bin/env bash
# The TLS connections the hub's API server keeps to the webhook across its pauses, and what a new
# one costs it (tests/system/tests/vs_policy.rs, webhook_connections_across_pauses): the webhook
# replica as installed, called through deploy/'s Service reference (HTTP/1.1, as on a hub), bursts
# of VS_BURST creates VS_PAUSE_SECONDS apart (15 s). Prints new connections and API server CPU
# per create for each burst. Needs root (the network namespace); about two minutes.
#
#   scripts/keepalive.sh
#   EDGEGATE_WEBHOOK_RELEASE=/path/to/old/edgegate-webhook scripts/keepalive.sh   another build
set -euo pipefail
cd "$(dirname "$0")/.."
tests/control-plane/build.sh >/dev/null
cargo build --release --locked --workspace --quiet
restore=""
if [ -n "${EDGEGATE_WEBHOOK_RELEASE:-}" ]; then
  cp target/release/edgegate-webhook target/release/edgegate-webhook.kept
  restore=1
  cp "$EDGEGATE_WEBHOOK_RELEASE" target/release/edgegate-webhook
fi
trap '[ -n "$restore" ] && mv target/release/edgegate-webhook.kept target/release/edgegate-webhook' EXIT
cargo test --release --locked -p edgegate-system-tests --test vs_policy -- --ignored --nocapture webhook_connections_across_pauses 2>&1 |
  awk '/^vs:|^skipped|test result/ { print } /panicked/ { print; getline; print }'
