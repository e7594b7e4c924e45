#!/usr/bin/env bash
# Build a release of edgegate from this checkout into dist/. Nothing is published or tagged: the
# commands that publish it are printed at the end.
#
#   scripts/release.sh VERSION [--platforms amd64,arm64] [--bin-dir DIR] [--arm64-bin-dir DIR]
#                      [--key cosign.key] [--skip-sbom] [--skip-sign] [--skip-min-version]
#                      [--test-build] [--out DIR]
#
# VERSION (0.2.0 or v0.2.0) must be the workspace's version in Cargo.toml and have a section in
# CHANGELOG.md. It writes, into --out (default dist/):
#   edgegate-image-VERSION.oci.tar         the image for every platform as one OCI image index, in an
#                                          OCI image layout (tarred): `crane push --index` pushes it;
#                                          each platform's image from scripts/image.sh
#   edgegate-PATH-VERSION.yaml             one rendered manifest per documented install path
#                                          (docs/deploy.md), the image pinned by the index's digest:
#                                          observe, enforce, producer, producer-milo,
#                                          producer-milo-sharded, monitoring,
#                                          producer-milo-monitoring, the Karmada hub's and
#                                          host's (observe, enforce, producer), and the grants
#                                          for Milo's root and a project control plane
#                                          (milo-grant, project-grant); each passes `edgegate
#                                          render-check`
#   BINARY-VERSION-linux-ARCH.tar.gz       edgegate, edgegate-webhook, edgegate-pruner,
#                                          edgegate-producer (each with LICENSE), per platform
#   *.cdx.json                             CycloneDX SBOMs (cargo-cyclonedx): one per archive (its
#                                          package's Cargo graph for that target), one per image
#                                          (the four packages' and the Debian packages it carries)
#   *.sig, edgegate-VERSION-cosign.pub     cosign's signature of each SBOM (sign-blob), and the
#                                          public key that verifies them and the image
#   edgegate-VERSION-release.txt           the digest, each binary's glibc floor (the highest
#                                          GLIBC_ symbol version it imports), the publish commands
#   edgegate-VERSION-SHA256SUMS            sha256sum of all the above
#
# Checks, each failing the release: every binary says VERSION and has no test-only switch; the
# release's binaries carry their dependency list (cargo-auditable's .dep-v0 section); each arm64
# binary runs under qemu-user with the arm64 image's own libraries (--version, `edgegate check`
# on a fixture); each image's glibc is at least what its binaries need; the image index is pushed
# to a registry on loopback (crane registry serve), signed there with cosign (the transparency
# log off: it cannot be reached from here), verified with the documented `cosign verify` and the
# public key, and a tampered image carrying the genuine signature is refused (so is a tampered
# SBOM); every manifest is server-side dry-run on the oldest (scripts/min-version.sh, Kubernetes
# 1.30) and the newest (--newest, the tests' 1.36) supported API servers.
#
# --platforms: amd64, arm64 or both (default). arm64 binaries are cross-built with Debian's Rust
# (scripts/cross-arm64.sh) unless --arm64-bin-dir names them.
# --bin-dir: the four amd64 binaries already built (default: `cargo auditable build --release
# --locked -p edgegate -p edgegate-webhook -p edgegate-pruner -p edgegate-producer` first, into
# target/release: the four packages alone, so tests/system's `test-only-*` features never reach
# them; the release fails if the producer lists or accepts such a flag, unless --test-build says
# these are a test's own, which also excuses a missing dependency list).
# --key: the release's cosign private key (its password in COSIGN_PASSWORD); without it a key
# pair made for this run signs, and the notes say so: such a release verifies only against the
# public key it ships.
# The tests package debug binaries this way (tests/system/tests/release.rs, with --test-build
# --platforms amd64 --skip-sbom --skip-sign --skip-min-version): the same code, fewer tools to
# build in CI. Reproducible, as scripts/image.sh is: SOURCE_DATE_EPOCH (default 0) dates the
# archives' files.
#
# Needs: cargo, go, kubectl (kustomize built in; EDGEGATE_KUSTOMIZE="kustomize build" as in the
# tests), objdump, sha256sum, tar, gzip, python3, and what scripts/image.sh,
# scripts/cross-arm64.sh (root, apt-get) and scripts/min-version.sh need. cosign, crane,
# cargo-auditable and cargo-cyclonedx are built into the cache by tests/*/build.sh and
# tests/cargo-tool.sh.
set -euo pipefail
umask 022
repo=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}
kustomize=${EDGEGATE_KUSTOMIZE:-kubectl kustomize}
version=
bin_dir=
out=$repo/dist
min_version=1
test_build=0
platforms=amd64,arm64
arm64_bin_dir=
key=
sbom=1
sign=1
while [[ $# -gt 0 ]]; do
  case $1 in
    --bin-dir) bin_dir=$2; shift 2 ;;
    --bin-dir=*) bin_dir=${1#*=}; shift ;;
    --arm64-bin-dir) arm64_bin_dir=$2; shift 2 ;;
    --arm64-bin-dir=*) arm64_bin_dir=${1#*=}; shift ;;
    --platforms) platforms=$2; shift 2 ;;
    --platforms=*) platforms=${1#*=}; shift ;;
    --key) key=$2; shift 2 ;;
    --key=*) key=${1#*=}; shift ;;
    --skip-sbom) sbom=0; shift ;;
    --skip-sign) sign=0; shift ;;
    --out) out=$2; shift 2 ;;
    --out=*) out=${1#*=}; shift ;;
    --skip-min-version) min_version=0; shift ;;
    --test-build) test_build=1; shift ;;
    -h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "release.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    *) [[ -z $version ]] || { echo "release.sh: one VERSION only" >&2; exit 2; }; version=${1#v}; shift ;;
  esac
done
[[ -n $version ]] || { echo "usage: scripts/release.sh VERSION [--platforms amd64,arm64] [--bin-dir DIR] [--arm64-bin-dir DIR] [--key FILE] [--skip-sbom] [--skip-sign] [--skip-min-version] [--test-build] [--out DIR] (see --help)" >&2; exit 2; }
archs=()
for p in ${platforms//,/ }; do
  [[ $p == amd64 || $p == arm64 ]] || { echo "release.sh: --platforms: $p is not amd64 or arm64" >&2; exit 2; }
  [[ " ${archs[*]} " == *" $p "* ]] || archs+=("$p")
done
((${#archs[@]} > 0)) || { echo "release.sh: --platforms names none" >&2; exit 2; }
[[ -z $key || -f $key ]] || { echo "release.sh: --key $key is not a file" >&2; exit 2; }
[[ -z $key || ${COSIGN_PASSWORD+set} == set ]] || { echo "release.sh: --key needs its password in COSIGN_PASSWORD" >&2; exit 2; }
for tool in kubectl objdump sha256sum tar gzip go python3; do
  command -v "$tool" >/dev/null || { echo "release.sh: needs $tool on PATH" >&2; exit 2; }
done

# The version is the one the binaries and the image will say, and the CHANGELOG describes it.
cargo_version=$(awk -F'"' '/^\[workspace.package\]/ { in_ws = 1; next } /^\[/ { in_ws = 0 } in_ws && /^version *=/ { print $2; exit }' "$repo/Cargo.toml")
[[ $version == "$cargo_version" ]] || { echo "release.sh: VERSION $version is not Cargo.toml's workspace version ($cargo_version)" >&2; exit 1; }
grep -q "^## \[$version\]" "$repo/CHANGELOG.md" || { echo "release.sh: CHANGELOG.md has no '## [$version]' section" >&2; exit 1; }
image_name=ghcr.io/datum-cloud/edgegate
# The image's revision label is HEAD: a release of uncommitted changes would name the wrong commit.
if [[ -n $(git -C "$repo" status --porcelain --untracked-files=no 2>/dev/null) ]]; then
  echo "release.sh: warning: uncommitted changes; the image's revision label names HEAD ($(git -C "$repo" rev-parse --short HEAD)) without them" >&2
fi

started=$(date +%s)
declare -A bins
if [[ " ${archs[*]} " == *" amd64 "* ]]; then
  if [[ -z $bin_dir ]]; then
    auditable=$("$repo/tests/cargo-tool.sh" cargo-auditable)
    (cd "$repo" && PATH="$auditable:$PATH" cargo auditable build --release --locked \
      -p edgegate -p edgegate-webhook -p edgegate-pruner -p edgegate-producer) >&2
    bin_dir=$target/release
  fi
  bins[amd64]=$bin_dir
fi
if [[ " ${archs[*]} " == *" arm64 "* ]]; then
  bins[arm64]=${arm64_bin_dir:-$("$repo/scripts/cross-arm64.sh")}
fi
# How each platform's binaries run here: arm64 under qemu-user, first with Debian's arm64 cross
# libraries, then (below) with the image's own. And how their dynamic symbols are read.
# Each run bounded: a binary that hangs under emulation fails the release, saying so.
runner() { case $1 in amd64) echo "timeout 60" ;; arm64) echo "timeout 60 qemu-aarch64 -L ${2:-/usr/aarch64-linux-gnu}" ;; esac; }
objdump_of() { case $1 in amd64) echo objdump ;; arm64) echo aarch64-linux-gnu-objdump ;; esac; }
binaries=(edgegate edgegate-webhook edgegate-pruner edgegate-producer)
for arch in "${archs[@]}"; do
  dir=${bins[$arch]}
  run=$(runner "$arch")
  for b in "${binaries[@]}"; do
    [[ -x $dir/$b ]] || { echo "release.sh: $dir/$b is missing" >&2; exit 1; }
    said=$($run "$dir/$b" --version) || { echo "release.sh: $arch $b --version failed or hung ($run)" >&2; exit 1; }
    [[ $said == *" $version"* ]] || { echo "release.sh: $arch $b --version says '$said', not $version" >&2; exit 1; }
    # cargo-auditable's dependency list, which scanners (cargo audit bin, trivy, syft) read.
    if ! $(objdump_of "$arch") -h "$dir/$b" | grep -q '\.dep-v0'; then
      ((test_build)) || { echo "release.sh: $dir/$b carries no dependency list (.dep-v0): build it with cargo auditable" >&2; exit 1; }
      echo "release.sh: warning: $dir/$b carries no dependency list (a test build)" >&2
    fi
  done
  # The switches that turn every fence off and skip the grace exist only behind cargo features the
  # tests enable: a producer built for release neither lists them nor accepts them, whatever
  # --bin-dir says. (--test-build is how the tests package their own debug build, which has them:
  # said, not refused; its image.sh is told the same.)
  fence_help=$($run "$dir/edgegate-producer" --help 2>&1 || true)
  for flag in --test-only-break-the-fence --test-only-skip-the-grace; do
    fence_said=$($run "$dir/edgegate-producer" --shard --prune "$flag" --version 2>&1 || true)
    if [[ $fence_help == *test-only* || $fence_said != *"unexpected argument '$flag'"* ]]; then
      if [[ $test_build == 0 ]]; then
        echo "release.sh: $arch edgegate-producer lists or accepts $flag: built with a test feature, not a release" >&2
        exit 1
      fi
      echo "release.sh: warning: $dir/edgegate-producer has $flag (a test build): not for release" >&2
    fi
  done
done

mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -f "$out"/*"-$version"[.-]*
work=$(mktemp -d "${TMPDIR:-/tmp}/edgegate-release.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Each platform's image, each read back by crane (what it will push), then one OCI image index of
# them all in an OCI image layout, shipped tarred; its digest is what the manifests pin.
crane=$("$repo/tests/crane/build.sh")
builder=$("$repo/tests/image/build.sh")
declare -A rootfs
platform_images=()
for arch in "${archs[@]}"; do
  tarball=$work/image-$arch.tar
  image_flags=(--arch "$arch" --bin-dir "${bins[$arch]}" --out "$tarball")
  ((test_build == 0)) || image_flags+=(--test-build)
  platform_digest=$("$repo/scripts/image.sh" "${image_flags[@]}" | head -n1)
  read_back=$("$crane" digest --tarball "$tarball")
  [[ $read_back == "$platform_digest" ]] || { echo "release.sh: image.sh printed $platform_digest for $arch, crane reads $read_back" >&2; exit 1; }
  echo "image linux/$arch $platform_digest ($(du -h "$tarball" | cut -f1))"
  platform_images+=("$tarball")
  # The image's own root filesystem (its first layer), to run its binaries with its libraries.
  rootfs[$arch]=$work/rootfs-$arch
  mkdir -p "${rootfs[$arch]}"
  first_layer=$(tar -xOf "$tarball" manifest.json | python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["Layers"][0])')
  tar -xOf "$tarball" "$first_layer" | tar -xzf - -C "${rootfs[$arch]}"
done
layout=$work/layout
digest=$("$builder" index --out "$layout" "${platform_images[@]}")
image=$out/edgegate-image-$version.oci.tar
tar -C "$layout" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@${SOURCE_DATE_EPOCH:-0}" -cf "$image" .
echo "image index $image_name@$digest (${archs[*]}; $(du -h "$image" | cut -f1))"

# arm64: each binary runs under qemu-user with the image's own libraries, and judges a fixture.
if [[ -n ${rootfs[arm64]:-} ]]; then
  run=$(runner arm64 "${rootfs[arm64]}")
  for b in "${binaries[@]}"; do
    said=$($run "${bins[arm64]}/$b" --version) || { echo "release.sh: arm64 $b --version failed with the image's libraries" >&2; exit 1; }
    echo "arm64 $said (qemu-user, the image's libraries)"
  done
  judged=$($run "${bins[arm64]}/edgegate" check --record "$repo/examples/records/edgereachability.yaml" \
    --slice "$repo/examples/copy-endpointslice.yaml" 2>&1) || { echo "release.sh: arm64 edgegate check: $judged" >&2; exit 1; }
  echo "arm64 edgegate check: $(head -n1 <<<"$judged")"
fi

# One manifest per documented install path: its resources and components, in docs/deploy.md's
# order (features, certificate source, enforce, images), in a kustomization that pins the digest
# as docs/deploy.md says. "name | resources | components" (under deploy/).
cp -a "$repo/deploy" "$work/deploy"
paths=(
  "observe | overlays/observe |"
  "enforce | overlays/enforce |"
  "producer | base | producer cert-manager enforce images"
  "producer-milo | base | producer producer-milo cert-manager enforce images"
  "producer-milo-sharded | base | producer producer-milo producer-sharded cert-manager enforce images"
  "monitoring | base | monitoring cert-manager enforce images"
  "producer-milo-monitoring | base | producer producer-milo monitoring cert-manager enforce images"
  "karmada-hub-observe | overlays/karmada-hub/hub |"
  "karmada-hub-enforce | overlays/karmada-hub/hub | enforce"
  "karmada-host-observe | overlays/karmada-hub/host |"
  "karmada-host-enforce | overlays/karmada-hub/host | enforce"
  "karmada-hub-producer | overlays/karmada-hub/hub | karmada-producer-hub enforce"
  "karmada-host-producer | overlays/karmada-hub/host | producer producer-milo karmada-producer-host enforce images"
  "milo-grant | milo |"
  "project-grant | project |"
)
manifests=()
for entry in "${paths[@]}"; do
  IFS='|' read -r name resources components <<<"$entry"
  name=$(xargs <<<"$name") resources=$(xargs <<<"$resources") components=$(xargs <<<"$components")
  dir=$work/render/$name
  mkdir -p "$dir"
  {
    echo "apiVersion: kustomize.config.k8s.io/v1beta1"
    echo "kind: Kustomization"
    echo "resources: [../../deploy/$resources]"
    if [[ -n $components ]]; then
      echo "components:"
      for c in $components; do echo "  - ../../deploy/components/$c"; done
    fi
    echo "images:"
    echo "  - name: $image_name"
    echo "    digest: $digest"
  } >"$dir/kustomization.yaml"
  manifest=$out/edgegate-$name-$version.yaml
  {
    echo "# edgegate $version, install path '$name' (docs/deploy.md): deploy/$resources${components:+ + components: $components},"
    echo "# image $image_name@$digest."
    echo "# kubectl apply --server-side -f $(basename "$manifest")"
    $kustomize "$dir"
  } >"$manifest"
  check=$("$bin_dir/edgegate" render-check "$manifest") || {
    echo "release.sh: $name: edgegate render-check: $check" >&2
    exit 1
  }
  images=$(awk '$1 == "image:" { print $2 }' "$manifest" | sort -u)
  deployments=$(grep -cE '^kind: (Deployment|StatefulSet)$' "$manifest" || true)
  if ((deployments > 0)) && [[ $images != "$image_name@$digest" ]]; then
    echo "release.sh: $name: images are '$images', not $image_name@$digest" >&2
    exit 1
  fi
  echo "manifest $(basename "$manifest"): $(grep -c '^kind:' "$manifest") objects, $deployments workloads; $check"
  manifests+=("$manifest")
done

# The binaries, one archive each (the binary and LICENSE) per platform, dated SOURCE_DATE_EPOCH,
# and the glibc each needs at least: the highest GLIBC_x.y version among the symbols it imports.
notes=$out/edgegate-$version-release.txt
image_glibc=$(awk '$1 == "libc6" { sub(/-.*/, "", $2); print $2 }' "$repo/scripts/image-packages.txt")
[[ -n $image_glibc ]] || { echo "release.sh: scripts/image-packages.txt pins no libc6" >&2; exit 1; }
{
  echo "edgegate $version"
  echo
  echo "image: $image_name:v$version = $image_name@$digest (edgegate-image-$version.oci.tar: one OCI image index, linux/${archs[*]})"
  echo
  echo "image packages (Debian 12, scripts/image-packages.txt): $(grep -v '^#' "$repo/scripts/image-packages.txt" | awk 'NF { printf "%s%s=%s", sep, $1, $2; sep = ", " }'); its glibc $image_glibc"
  echo
  echo "binaries (linux ${archs[*]}, dynamically linked against glibc):"
} >"$notes"
archives=()
for arch in "${archs[@]}"; do
  for b in "${binaries[@]}"; do
    stage=$work/archive/$arch/$b
    mkdir -p "$stage"
    cp "${bins[$arch]}/$b" "$stage/$b"
    cp "$repo/LICENSE" "$stage/LICENSE"
    archive=$out/$b-$version-linux-$arch.tar.gz
    tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@${SOURCE_DATE_EPOCH:-0}" \
      -cf - "$b" LICENSE | gzip -n -9 >"$archive"
    floor=$($(objdump_of "$arch") -T "${bins[$arch]}/$b" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n1)
    [[ -n $floor ]] || { echo "release.sh: $arch $b imports no GLIBC_ symbol version (static?)" >&2; exit 1; }
    # The image's glibc (libc6's upstream version, pinned) must be at least what the binary needs.
    if [[ $(printf '%s\n%s\n' "$floor" "$image_glibc" | sort -V | tail -n1) != "$image_glibc" ]]; then
      echo "release.sh: $arch $b needs glibc >= $floor; the image's (scripts/image-packages.txt) is $image_glibc" >&2
      exit 1
    fi
    echo "  $(basename "$archive"): glibc >= $floor ($(du -h "$archive" | cut -f1))" | tee -a "$notes"
    archives+=("$archive")
  done
done

# SBOMs: each archive's from its package's Cargo graph for its target; each image's from the four
# packages' and the Debian packages its first layer carries.
sboms=()
if ((sbom)); then
  sboms=($("$repo/scripts/sbom.sh" --out "$out" --version "$version" --platforms "${archs[*]}"))
  for f in "${sboms[@]}"; do echo "sbom $(basename "$f")"; done
else
  echo "sbom: skipped (--skip-sbom)"
fi

# Signatures: the image index, pushed to a registry on loopback, and each SBOM, signed with the
# release key; each verified as docs/from-source.md says, and tampering refused.
signed=()
if ((sign)); then
  sign_flags=(--out "$out" --version "$version" --layout "$layout" --digest "$digest")
  [[ -z $key ]] || sign_flags+=(--key "$key")
  signed=($("$repo/scripts/sign.sh" "${sign_flags[@]}" "${sboms[@]}"))
  [[ -n $key ]] || echo "signing key: made for this run (no --key): verifies against the public key shipped here only" | tee -a "$notes"
else
  echo "sign: skipped (--skip-sign)"
fi

{
  echo
  echo "manifests (kubectl apply --server-side -f FILE):"
  for m in "${manifests[@]}"; do echo "  $(basename "$m")"; done
  echo
  echo "to publish (from a machine that may push; cosign signs with the release key, transparency log off):"
  echo "  mkdir image && tar -xf edgegate-image-$version.oci.tar -C image"
  echo "  crane push --index image $image_name:v$version"
  echo "  cosign sign --key cosign.key --tlog-upload=false $image_name@$digest"
  echo "  git tag -s v$version -m 'edgegate $version' && git push origin v$version"
} >>"$notes"

files=("$image" "${manifests[@]}" "${archives[@]}" "${sboms[@]}" "${signed[@]}" "$notes")
(cd "$out" && for f in "${files[@]}"; do basename "$f"; done | xargs sha256sum -- >"edgegate-$version-SHA256SUMS")
echo "checksums edgegate-$version-SHA256SUMS ($(wc -l <"$out/edgegate-$version-SHA256SUMS") files)"

if ((min_version)); then
  "$repo/scripts/min-version.sh" "${manifests[@]}"
  "$repo/scripts/min-version.sh" --newest "${manifests[@]}"
else
  echo "min-version: skipped (--skip-min-version): the manifests were not dry-run on the oldest and newest supported Kubernetes"
fi

echo
echo "release $version in $out ($(($(date +%s) - started))s). Nothing was pushed; to publish, see the end of $(basename "$notes")."
