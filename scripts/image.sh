#!/usr/bin/env bash
# Build edgegate's container image without a container engine: a docker-style image tarball
# (what `crane push` and `docker load` read) holding
#   layer 1: libc6 and libgcc-s1 from Debian 12, at the versions scripts/image-packages.txt pins
#            (apt-get download, dpkg-deb -x), /etc/passwd and
#            /etc/group with the user nonroot (65532), /tmp, /home/nonroot;
#   layer 2: /usr/local/bin/{edgegate-webhook,edgegate-pruner,edgegate-producer,edgegate};
# run as 65532:65532 with the webhook as entrypoint, as the Dockerfile's image.
#
#   scripts/image.sh [--arch amd64|arm64] [--bin-dir DIR] [--out FILE] [--test-build]
#
# --arch: the platform, linux/amd64 (default) or linux/arm64; the packages are downloaded for it
# (arm64 needs it added to dpkg as a foreign architecture, as scripts/cross-arm64.sh does) and
# --bin-dir must hold binaries built for it.
# --bin-dir: where the four binaries are (default: target/release, after `cargo build --release
# --locked -p edgegate -p edgegate-webhook -p edgegate-pruner -p edgegate-producer`: the four
# packages alone, so no test package's features reach them). --out: the archive (default:
# target/edgegate-image.tar). --test-build: the binaries are a test's own, whose producer has the
# `--test-only-*` flags; without it such a producer fails the build. Prints the image digest (sha256:...) and the archive's path, one a
# line.
#
# Reproducible: the same binaries, packages, commit and SOURCE_DATE_EPOCH (default 0, the time of
# every file and of the image) give the same digest. The builder (tests/image, go-containerregistry)
# is built once into a cache keyed by its version (tests/image/build.sh), as are the .deb files;
# both under a lock, so two runs at once are safe.
set -euo pipefail
umask 022
repo=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}
bin_dir=
test_build=0
arch=amd64
out=$target/edgegate-image.tar
while [[ $# -gt 0 ]]; do
  case $1 in
    --bin-dir) bin_dir=$2; shift 2 ;;
    --bin-dir=*) bin_dir=${1#*=}; shift ;;
    --out) out=$2; shift 2 ;;
    --out=*) out=${1#*=}; shift ;;
    --test-build) test_build=1; shift ;;
    --arch) arch=$2; shift 2 ;;
    --arch=*) arch=${1#*=}; shift ;;
    -h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "image.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $arch == amd64 || $arch == arm64 ]] || { echo "image.sh: --arch $arch: amd64 or arm64" >&2; exit 2; }
if [[ $arch != $(dpkg --print-architecture) ]] && ! dpkg --print-foreign-architectures | grep -qx "$arch"; then
  echo "image.sh: --arch $arch: dpkg knows no $arch packages here (dpkg --add-architecture $arch; apt-get update)" >&2
  exit 1
fi
cache_root=${EDGEGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/edgegate}

builder=$("$repo/tests/image/build.sh")

# The binaries.
if [[ -z $bin_dir ]]; then
  (cd "$repo" && cargo build --release --locked -p edgegate -p edgegate-webhook -p edgegate-pruner -p edgegate-producer) >&2
  bin_dir=$target/release
fi
for b in edgegate-webhook edgegate-pruner edgegate-producer edgegate; do
  [[ -x $bin_dir/$b ]] || { echo "image.sh: $bin_dir/$b is missing" >&2; exit 1; }
done
# A producer built with the test packages' features (`cargo build --workspace`) has switches that
# turn off its fences and grace: never in an image, unless it is a test's own.
# (An arm64 producer runs under qemu-user, with Debian's arm64 cross libraries.)
run=()
[[ $arch == "$(dpkg --print-architecture)" ]] || run=(qemu-aarch64 -L /usr/aarch64-linux-gnu)
if ((test_build == 0)) && ! help=$("${run[@]}" "$bin_dir/edgegate-producer" --help 2>&1); then
  echo "image.sh: $bin_dir/edgegate-producer --help failed: $help" >&2
  exit 1
fi
if ((test_build == 0)) && [[ $help == *test-only* ]]; then
  echo "image.sh: $bin_dir/edgegate-producer has --test-only-* flags (built with the test package's features):" \
    "build the four packages by name (cargo build --release --locked -p edgegate -p edgegate-webhook -p edgegate-pruner -p edgegate-producer)" >&2
  exit 1
fi

# The packages, at the versions scripts/image-packages.txt pins, each .deb downloaded once into
# the cache.
pins=$repo/scripts/image-packages.txt
debs=$cache_root/image-debs
mkdir -p "$debs"
exec 8>"$debs/.lock"
flock 8
candidate() { apt-cache policy "$1" | awk '$1 == "Candidate:" { print $2 }'; }
download() { (cd "$debs/.partial" && apt-get download -qq -o APT::Sandbox::User=root "$1:$arch=$2" </dev/null) >&2; }
deb_files=()
notes=()
while read -r pkg version; do
  # Debian file names write the epoch's ':' as %3a.
  file=$debs/${pkg}_${version//:/%3a}_${arch}.deb
  if [[ ! -s $file ]]; then
    # Into a fresh directory first, so an interrupted download never leaves a cut .deb behind.
    rm -rf "$debs/.partial" && mkdir "$debs/.partial"
    if ! download "$pkg" "$version" 2>/dev/null; then
      apt-get update -qq </dev/null >&2
      if ! download "$pkg" "$version"; then
        echo "image.sh: $pkg $version, pinned in scripts/image-packages.txt, is not in the archive any more" \
          "(apt offers $(candidate "$pkg:$arch")): move the pin as docs/from-source.md says" >&2
        exit 1
      fi
    fi
    mv "$debs/.partial/$(basename "$file")" "$file"
    rm -rf "$debs/.partial"
  fi
  [[ -s $file ]] || { echo "image.sh: apt-get download $pkg=$version gave no $file" >&2; exit 1; }
  deb_files+=("$file")
  notes+=("$pkg=$version")
done < <(grep -v '^#' "$pins" | grep -v '^[[:space:]]*$')
[[ ${#deb_files[@]} -gt 0 ]] || { echo "image.sh: $pins pins no package" >&2; exit 1; }
exec 8>&-

work=$(mktemp -d "${TMPDIR:-/tmp}/edgegate-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir "$work/rootfs"
for f in "${deb_files[@]}"; do
  dpkg-deb -x "$f" "$work/rootfs"
done

version=$(awk -F'"' '/^\[workspace.package\]/ { in_ws = 1; next } /^\[/ { in_ws = 0 } in_ws && /^version *=/ { print $2; exit }' "$repo/Cargo.toml")
source_url=$(awk -F'"' '/^\[workspace.package\]/ { in_ws = 1; next } /^\[/ { in_ws = 0 } in_ws && /^repository *=/ { print $2; exit }' "$repo/Cargo.toml")
revision=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)
mkdir -p "$(dirname "$out")"
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
start=$(date +%s)
digest=$("$builder" \
  --rootfs "$work/rootfs" --packages "${notes[*]}" --bin-dir "$bin_dir" --out "$out" --arch "$arch" \
  --tag "ghcr.io/datum-cloud/edgegate:v$version" --epoch "${SOURCE_DATE_EPOCH:-0}" \
  --source "$source_url" --revision "$revision" --version "$version")
echo "wrote $out ($(du -h "$out" | cut -f1), ${notes[*]}) in $(( $(date +%s) - start ))s" >&2
echo "$digest"
echo "$out"
