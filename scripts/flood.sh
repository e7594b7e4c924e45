#!/usr/bin/env bash
# The webhook under a flood of ~7.5 MiB reviews (tests/flood.rs) on the release build, each case
# alone for 20 s: many HTTP/1.1 connections, one HTTP/2 connection of many streams, chunked bodies.
# Prints each case's peak RSS and the small reviews' p50/p99 (docs/webhook.md quotes them).
#
#   scripts/flood.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -p edgegate-webhook
EDGEGATE_WEBHOOK_BIN="$PWD/target/release/edgegate-webhook" EDGEGATE_FLOOD_SECONDS="${1:-20}" \
  cargo test --locked -p edgegate-webhook --test flood -- --test-threads=1 --nocapture 2>&1 | grep -oE 'flood .*|test result.*'
