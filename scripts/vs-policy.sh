#!/usr/bin/env bash
# edgegate's webhook side by side with a ValidatingAdmissionPolicy and with no admission, on one
# kube-apiserver of the project's own build (loopback only, bounded waits): answers, large-slice
# create times, throughput and CPU per create, and the webhook calls matchConditions save.
# Release build; about 10 minutes on 2 cores. Figures are written up in docs/performance.md.
#
#   scripts/vs-policy.sh        prints the figures (lines starting "vs:")
set -euo pipefail
cd "$(dirname "$0")/.."
tests/control-plane/build.sh >/dev/null
cargo build --release --locked --workspace --quiet
cargo test --release --locked -p edgegate-system-tests --test vs_policy -- --ignored --nocapture 2>&1 |
  awk '/^vs:|test result/ { print } /panicked/ { print; getline; print }'
