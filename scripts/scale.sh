#!/usr/bin/env bash
# Hub scale on the project's own kube-apiserver + etcd (tests/control-plane), loopback only:
# 10,000 namespaces with a record and 10 copies each (100,000 copies), then the pruner and the
# webhook (--kubernetes; then with 1,000,000 record addresses) started against it and measured;
# then the producer between a project of 10,000 namespaces and a hub.
# Release build. Bounded: every wait in tests/system/tests/scale.rs has a limit. About 15-25 minutes on 2 cores.
#
#   scripts/scale.sh            prints the figures (lines starting "scale:")
#
# Exits non-zero when a goal of docs/performance.md's hub-scale table is missed (pruner ready
# ≤ 60 s and RSS ≤ 256 MiB, record change → copy deleted median ≤ 100 ms, webhook holding
# 1,099,990 addresses ≤ 150 MiB): hub_scale asserts them after printing every figure.
set -euo pipefail
cd "$(dirname "$0")/.."
tests/control-plane/build.sh >/dev/null
cargo build --release --locked --workspace --quiet
cargo test --release --locked -p edgegate-system-tests --test scale -- --ignored --nocapture 2>&1 |
  awk '/^scale:|test result/ { print } /panicked/ { print; getline; print }'
cargo test --release --locked -p edgegate-system-tests --test producer_e2e producer_with_10000_namespaces -- --ignored --nocapture 2>&1 |
  awk '/^producer:|test result/ { print } /panicked/ { print; getline; print }'
