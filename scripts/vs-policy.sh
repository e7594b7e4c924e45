#!/usr/bin/env bash
# The hub API server's cost per admitted copy, side by side on one kube-apiserver of the project's
# own build (bounded waits, nothing leaves the machine): no admission; the baseline
# ValidatingAdmissionPolicy (tests/policy/edgereachability-vap.yaml); edgegate's webhook as
# installed (one replica in a network namespace, called through deploy/'s Service reference, so
# over HTTP/1.1 as on a hub); and edgegate's own policy mode (deploy/components/policy).
#
# Prints the answers to the decision table (incl. two UPDATEs); for records of 1, 100, 1,000 and
# 8,192 addresses × copies of 1, 100 and 1,000 endpoints (the last one named), VS_CREATES
# dry-run creates per cell (none started after VS_CELL_SECONDS, 15), 16 in flight, over VS_ROUNDS rounds (modes alternating, their order
# rotated each round): creates/s, p50/p99, API server and webhook CPU per create, then medians
# over rounds with the ratio to no admission and the spread; the TLS connections the API server
# opened to the webhook per 1,000 calls; and the webhook calls matchConditions save.
# With VS_PROFILE=1, CPU profiles of kube-apiserver in the last round (1 address, 1 endpoint,
# 15 s per admitting mode) in VS_PROFILE_DIR (default target/vs-profiles), and their top 25
# cumulative functions if `go` is on PATH.
#
# Needs root (the network namespace). Release build; with the defaults about 25 minutes on 2
# cores, most of it the two policies' 1,000-endpoint cells against large records (≈ 0.9 s of API
# server CPU per create at 8,192 addresses, so each stops at VS_CELL_SECONDS).
# VS_CREATES=40 VS_ROUNDS=1: about 4 minutes.
#
#   scripts/vs-policy.sh                                 prints the figures (lines starting "vs:")
#   VS_CREATES=100 VS_ROUNDS=1 VS_PROFILE=1 scripts/vs-policy.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export VS_CREATES="${VS_CREATES:-300}" VS_ROUNDS="${VS_ROUNDS:-3}" VS_PROFILE="${VS_PROFILE:-0}"
export VS_CELL_SECONDS="${VS_CELL_SECONDS:-15}"
tests/control-plane/build.sh >/dev/null
cargo build --release --locked --workspace --quiet
cargo test --release --locked -p edgegate-system-tests --test vs_policy -- --ignored --nocapture 2>&1 |
  awk '/^vs:|^skipped|test result/ { print } /panicked/ { print; getline; print }'
