#!/usr/bin/env bash
# Install one cargo subcommand, at the version pinned below, from crates.io (its own Cargo.lock)
# into a cache outside the repo keyed by version, so a second run is instant. Prints the
# directory holding the binary (put it on PATH: cargo finds `cargo-NAME` there). Only
# scripts/release.sh needs these.
#
#   tests/cargo-tool.sh cargo-auditable     the dependency list embedded in each binary
#   tests/cargo-tool.sh cargo-cyclonedx     CycloneDX SBOMs from the Cargo graph
#
# Safe to start several times at once: one install runs under a lock, the others wait for it.
set -euo pipefail
case ${1:-} in
  cargo-auditable) version=0.7.7 ;;
  cargo-cyclonedx) version=0.5.9 ;;
  *) echo "usage: tests/cargo-tool.sh cargo-auditable|cargo-cyclonedx" >&2; exit 2 ;;
esac
name=$1
root=${EDGEGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/edgegate}/$name/$version
if [[ -x $root/bin/$name ]]; then
  echo "$root/bin"
  exit 0
fi
mkdir -p "$root"
exec 9>"$root/.lock"
flock 9
if [[ ! -x $root/bin/$name ]]; then # else installed by whoever held the lock before us
  start=$(date +%s)
  # Its own target directory: the caller's CARGO_TARGET_DIR holds edgegate's builds.
  CARGO_TARGET_DIR=$root/target cargo install --quiet --locked --version "=$version" --root "$root" "$name" >&2
  rm -rf "$root/target"
  echo "installed $name $version in $(($(date +%s) - start))s" >&2
fi
echo "$root/bin"
