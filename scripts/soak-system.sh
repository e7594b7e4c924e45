#!/usr/bin/env bash
# The whole system under churn and faults, checked at every moment (tests/system/src/soak): two
# kube-apiservers (the hub, and a project API server behind the Milo stand-in serving seven
# projects) with kube-controller-manager, three producer replicas sharing the projects' buckets
# (components/producer-sharded: each writes records and deletes copies for its own), two webhook
# replicas behind their Service, a cell stand-in writing a copy per pod, seeded churn on the
# projects, and the faults in a seeded order, each kind once per cycle, until the duration is
# over. Prints the report (lines starting "soak:"); fails on any invariant violation, panic,
# fault that did not happen, or binary not ready again within 60 s of a fault.
#
#   scripts/soak-system.sh [--seed N] [--duration SECONDS] [--rate CHANGES_PER_SECOND] [--namespaces N]
#
# Defaults: seed 1, 1,800 s, 20 changes/s, 20 namespaces. Release binaries; needs root (the
# webhooks' network namespaces). Loopback only; every wait is bounded.
set -euo pipefail
cd "$(dirname "$0")/.."
while [ $# -gt 0 ]; do
  case "$1" in
    --seed) export SOAK_SEED="$2"; shift 2 ;;
    --duration) export SOAK_DURATION="$2"; shift 2 ;;
    --rate) export SOAK_RATE="$2"; shift 2 ;;
    --namespaces) export SOAK_NAMESPACES="$2"; shift 2 ;;
    *) echo "usage: $0 [--seed N] [--duration SECONDS] [--rate CHANGES_PER_SECOND] [--namespaces N]" >&2; exit 2 ;;
  esac
done
tests/control-plane/build.sh kube-controller-manager >/dev/null
cargo build --release --locked -p edgegate -p edgegate-webhook -p edgegate-pruner -p edgegate-producer --quiet
cargo test --release --locked -p edgegate-system-tests --test soak soak -- --ignored --exact --nocapture 2>&1 |
  awk '/^soak:|test result/ { print } /panicked/ { print; getline; print }'
