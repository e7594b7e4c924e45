#!/usr/bin/env bash
# Build a release of edgegate from this checkout into dist/. Nothing is pushed or tagged: the
# commands that publish it are printed at the end.
#
#   scripts/release.sh VERSION [--bin-dir DIR] [--test-build] [--out DIR] [--skip-min-version]
#
# VERSION (0.2.0 or v0.2.0) must be the workspace's version in Cargo.toml and have a section in
# CHANGELOG.md. It writes, into --out (default dist/):
#   edgegate-image-VERSION.tar             the image (scripts/image.sh), a docker-style tarball
#                                          `crane push` reads; its digest read back with crane
#   edgegate-PATH-VERSION.yaml             one rendered manifest per documented install path
#                                          (docs/deploy.md), the image pinned by that digest:
#                                          observe, enforce, producer, producer-milo,
#                                          producer-milo-sharded, monitoring,
#                                          producer-milo-monitoring, the Karmada hub's and
#                                          host's (observe, enforce, producer), and the grants
#                                          for Milo's root and a project control plane
#                                          (milo-grant, project-grant); each passes `edgegate
#                                          render-check`
#   BINARY-VERSION-linux-amd64.tar.gz      edgegate, edgegate-webhook, edgegate-pruner,
#                                          edgegate-producer (each with LICENSE)
#   edgegate-VERSION-release.txt           the digest, each binary's glibc floor (the highest
#                                          GLIBC_ symbol version it imports, objdump -T), the
#                                          push commands
#   edgegate-VERSION-SHA256SUMS            sha256sum of all the above
# and then runs scripts/min-version.sh on the manifests (a server-side dry-run on the oldest
# supported kube-apiserver; cold its build takes about 15 minutes on 2 cores).
#
# --bin-dir: the four binaries already built (default: `cargo build --release --locked -p edgegate
# -p edgegate-webhook -p edgegate-pruner -p edgegate-producer` first, into target/release: the four
# packages alone, so tests/system's `test-only-*` features never reach them; the release fails
# if the producer lists or accepts such a flag, unless --test-build says these are a test's own).
# The tests package debug binaries this way (tests/system/tests/release.rs, with --test-build
# --skip-min-version): the same code, smaller figures.
# Reproducible, as scripts/image.sh is: SOURCE_DATE_EPOCH (default 0) dates the archives' files.
#
# Needs: cargo, go, kubectl (kustomize built in; EDGEGATE_KUSTOMIZE="kustomize build" as in the
# tests), objdump, sha256sum, tar, gzip, and what scripts/image.sh and scripts/min-version.sh need.
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
while [[ $# -gt 0 ]]; do
  case $1 in
    --bin-dir) bin_dir=$2; shift 2 ;;
    --bin-dir=*) bin_dir=${1#*=}; shift ;;
    --out) out=$2; shift 2 ;;
    --out=*) out=${1#*=}; shift ;;
    --skip-min-version) min_version=0; shift ;;
    --test-build) test_build=1; shift ;;
    -h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "release.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    *) [[ -z $version ]] || { echo "release.sh: one VERSION only" >&2; exit 2; }; version=${1#v}; shift ;;
  esac
done
[[ -n $version ]] || { echo "usage: scripts/release.sh VERSION [--bin-dir DIR] [--test-build] [--out DIR] [--skip-min-version]" >&2; exit 2; }
for tool in kubectl objdump sha256sum tar gzip go; do
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
if [[ -z $bin_dir ]]; then
  (cd "$repo" && cargo build --release --locked -p edgegate -p edgegate-webhook -p edgegate-pruner -p edgegate-producer) >&2
  bin_dir=$target/release
fi
binaries=(edgegate edgegate-webhook edgegate-pruner edgegate-producer)
for b in "${binaries[@]}"; do
  [[ -x $bin_dir/$b ]] || { echo "release.sh: $bin_dir/$b is missing" >&2; exit 1; }
  said=$("$bin_dir/$b" --version)
  [[ $said == *" $version"* ]] || { echo "release.sh: $b --version says '$said', not $version" >&2; exit 1; }
done
# The switches that turn every fence off and skip the grace exist only behind cargo features the
# tests enable: a producer built for release neither lists them nor accepts them, whatever
# --bin-dir says. (--test-build is how the tests package their own debug build, which has them:
# said, not refused; its image.sh is told the same.)
fence_help=$("$bin_dir/edgegate-producer" --help 2>&1 || true)
for flag in --test-only-break-the-fence --test-only-skip-the-grace; do
  fence_said=$("$bin_dir/edgegate-producer" --shard --prune "$flag" --version 2>&1 || true)
  if [[ $fence_help == *test-only* || $fence_said != *"unexpected argument '$flag'"* ]]; then
    if [[ $test_build == 0 ]]; then
      echo "release.sh: edgegate-producer lists or accepts $flag: built with a test feature, not a release" >&2
      exit 1
    fi
    echo "release.sh: warning: $bin_dir/edgegate-producer has $flag (a test build): not for release" >&2
  fi
done

mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -f "$out"/*"-$version"[.-]*
work=$(mktemp -d "${TMPDIR:-/tmp}/edgegate-release.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The image, and its digest read back from the archive by crane (what `crane push` will push).
image=$out/edgegate-image-$version.tar
image_flags=(--bin-dir "$bin_dir" --out "$image")
((test_build == 0)) || image_flags+=(--test-build)
image_out=$("$repo/scripts/image.sh" "${image_flags[@]}")
digest=$(head -n1 <<<"$image_out")
crane=$("$repo/tests/crane/build.sh")
read_back=$("$crane" digest --tarball "$image")
[[ $read_back == "$digest" ]] || { echo "release.sh: image.sh printed $digest, crane reads $read_back" >&2; exit 1; }
echo "image $image_name@$digest ($(du -h "$image" | cut -f1))"

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

# The binaries, one archive each (the binary and LICENSE), dated SOURCE_DATE_EPOCH, and the glibc
# each needs at least: the highest GLIBC_x.y version among the symbols it imports.
notes=$out/edgegate-$version-release.txt
image_glibc=$(awk '$1 == "libc6" { sub(/-.*/, "", $2); print $2 }' "$repo/scripts/image-packages.txt")
[[ -n $image_glibc ]] || { echo "release.sh: scripts/image-packages.txt pins no libc6" >&2; exit 1; }
{
  echo "edgegate $version"
  echo
  echo "image: $image_name:v$version = $image_name@$digest (edgegate-image-$version.tar)"
  echo
  echo "image packages (Debian 12, scripts/image-packages.txt): $(grep -v '^#' "$repo/scripts/image-packages.txt" | awk 'NF { printf "%s%s=%s", sep, $1, $2; sep = ", " }'); its glibc $image_glibc"
  echo
  echo "binaries (linux amd64, dynamically linked against glibc):"
} >"$notes"
for b in "${binaries[@]}"; do
  stage=$work/archive/$b
  mkdir -p "$stage"
  cp "$bin_dir/$b" "$stage/$b"
  cp "$repo/LICENSE" "$stage/LICENSE"
  archive=$out/$b-$version-linux-amd64.tar.gz
  tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@${SOURCE_DATE_EPOCH:-0}" \
    -cf - "$b" LICENSE | gzip -n -9 >"$archive"
  floor=$(objdump -T "$bin_dir/$b" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n1)
  [[ -n $floor ]] || { echo "release.sh: $b imports no GLIBC_ symbol version (static?)" >&2; exit 1; }
  # The image's glibc (libc6's upstream version, pinned) must be at least what the binary needs.
  if [[ $(printf '%s\n%s\n' "$floor" "$image_glibc" | sort -V | tail -n1) != "$image_glibc" ]]; then
    echo "release.sh: $b needs glibc >= $floor; the image's (scripts/image-packages.txt) is $image_glibc" >&2
    exit 1
  fi
  echo "  $(basename "$archive"): glibc >= $floor ($(du -h "$archive" | cut -f1))" | tee -a "$notes"
done
push="$crane push $image $image_name:v$version"
{
  echo
  echo "manifests (kubectl apply --server-side -f FILE):"
  for m in "${manifests[@]}"; do echo "  $(basename "$m")"; done
  echo
  echo "to publish (from a machine that may push):"
  echo "  crane push edgegate-image-$version.tar $image_name:v$version"
  echo "  git tag -s v$version -m 'edgegate $version' && git push origin v$version"
} >>"$notes"

(cd "$out" && sha256sum -- edgegate-image-"$version".tar edgegate-*-"$version".yaml ./*-"$version"-linux-amd64.tar.gz \
  "edgegate-$version-release.txt" | sed 's| \./| |' >"edgegate-$version-SHA256SUMS")
echo "checksums edgegate-$version-SHA256SUMS ($(wc -l <"$out/edgegate-$version-SHA256SUMS") files)"

if ((min_version)); then
  "$repo/scripts/min-version.sh" "${manifests[@]}"
else
  echo "min-version: skipped (--skip-min-version): the manifests were not dry-run on the oldest supported Kubernetes"
fi

echo
echo "release $version in $out ($(($(date +%s) - started))s). Nothing was pushed; to publish:"
echo "  $push"
echo "  git tag -s v$version -m 'edgegate $version' && git push origin v$version"
