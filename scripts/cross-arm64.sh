#!/usr/bin/env bash
# Build the four binaries for linux/arm64 (aarch64-unknown-linux-gnu), their dependency lists
# embedded (cargo-auditable), into $CARGO_TARGET_DIR/aarch64-unknown-linux-gnu/release. Prints
# that directory.
#
#   scripts/cross-arm64.sh
#
# rustup's targets cannot be downloaded everywhere, so the compiler is Debian 12's (bookworm-
# security's rustc-web and cargo-web, with the arm64 standard library libstd-rust-web-dev:arm64)
# and the linker and C compiler Debian's aarch64 cross gcc (ring is the one dependency that
# compiles C). qemu-user runs the results (scripts/release.sh). Installs what is missing with
# apt-get (root; arm64 added as a foreign architecture), under a lock so two runs are safe.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}
packages=(rustc-web cargo-web libstd-rust-web-dev:arm64 gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user)
if ! dpkg -s "${packages[@]}" >/dev/null 2>&1; then
  exec 8>"${TMPDIR:-/tmp}/edgegate-apt.lock"
  flock 8
  if ! dpkg -s "${packages[@]}" >/dev/null 2>&1; then
    dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
    apt-get update -qq </dev/null >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}" </dev/null >&2
  fi
  exec 8>&-
fi
auditable=$("$repo/tests/cargo-tool.sh" cargo-auditable)
# Debian's cargo and rustc by path (rustup's come first on PATH and have no arm64 target here).
export RUSTC=/usr/bin/rustc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar
(cd "$repo" && PATH="$auditable:$PATH" CARGO_TARGET_DIR=$target /usr/bin/cargo auditable build --release --locked \
  --target aarch64-unknown-linux-gnu -p edgegate -p edgegate-webhook -p edgegate-pruner -p edgegate-producer) >&2
echo "$target/aarch64-unknown-linux-gnu/release"
