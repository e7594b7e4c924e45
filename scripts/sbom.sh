#!/usr/bin/env bash
# CycloneDX 1.5 SBOMs for a release (scripts/release.sh runs this), written into --out:
#   BINARY-VERSION-linux-ARCH.cdx.json          its package's Cargo graph for that target
#                                               (cargo-cyclonedx; build-time dependencies left out:
#                                               they are not in the binary)
#   edgegate-image-VERSION-linux-ARCH.cdx.json  the image: the four packages' graphs joined, and
#                                               the Debian packages scripts/image-packages.txt pins
# and prints their paths, one a line. Reproducible: dated SOURCE_DATE_EPOCH (default 0), no random
# serial number, the checkout's path written as ".".
#
#   scripts/sbom.sh --out DIR --version VERSION --platforms "amd64 arm64"
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out= version= platforms=
while [[ $# -gt 0 ]]; do
  case $1 in
    --out) out=$2; shift 2 ;;
    --version) version=$2; shift 2 ;;
    --platforms) platforms=$2; shift 2 ;;
    *) echo "usage: scripts/sbom.sh --out DIR --version VERSION --platforms \"amd64 arm64\"" >&2; exit 2 ;;
  esac
done
[[ -d $out && -n $version && -n $platforms ]] || { echo "usage: scripts/sbom.sh --out DIR --version VERSION --platforms \"amd64 arm64\"" >&2; exit 2; }
cyclonedx=$("$repo/tests/cargo-tool.sh" cargo-cyclonedx)
# cargo-cyclonedx writes one file beside each workspace member's Cargo.toml, under this name.
name=.edgegate-sbom-$$
trap 'rm -f "$repo"/$name.json "$repo"/*/$name.json "$repo"/tests/system/$name.json' EXIT
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-0}
for arch in $platforms; do
  case $arch in
    amd64) triple=x86_64-unknown-linux-gnu ;;
    arm64) triple=aarch64-unknown-linux-gnu ;;
    *) echo "sbom.sh: $arch is not amd64 or arm64" >&2; exit 2 ;;
  esac
  (cd "$repo" && PATH="$cyclonedx:$PATH" cargo cyclonedx --manifest-path "$repo/Cargo.toml" --format json \
    --spec-version 1.5 --target "$triple" --no-build-deps --override-filename "$name" --quiet) >&2
  python3 - "$repo" "$name.json" "$out" "$version" "$arch" "$repo/scripts/image-packages.txt" <<'PY'
import json, sys, urllib.parse

repo, name, out, version, arch, pins = sys.argv[1:]
packages = {"edgegate": ".", "edgegate-webhook": "webhook", "edgegate-pruner": "pruner", "edgegate-producer": "producer"}

def load(path):
    text = open(path).read().replace("file://" + repo, "file://.")
    return json.loads(text)

def write(path, bom):
    with open(path, "w") as f:
        json.dump(bom, f, indent=2, sort_keys=True)
        f.write("\n")
    print(path)

boms = {}
for binary, directory in packages.items():
    bom = load(f"{repo}/{directory}/{name}")
    boms[binary] = bom
    write(f"{out}/{binary}-{version}-linux-{arch}.cdx.json", bom)

# The image: every package's graph, and the Debian packages under the binaries.
components, dependencies, refs = {}, {}, []
for bom in boms.values():
    top = dict(bom["metadata"]["component"])
    refs.append(top["bom-ref"])
    for c in [top] + bom.get("components", []):
        components.setdefault(c["bom-ref"], c)
    for d in bom.get("dependencies", []):
        merged = dependencies.setdefault(d["ref"], set())
        merged.update(d.get("dependsOn", []))
for line in open(pins):
    fields = line.split()
    if not fields or fields[0].startswith("#"):
        continue
    package, pinned = fields[0], fields[1]
    purl = f"pkg:deb/debian/{package}@{urllib.parse.quote(pinned, safe='')}?arch={arch}&distro=debian-12"
    components[purl] = {"type": "library", "bom-ref": purl, "name": package, "version": pinned, "purl": purl}
    refs.append(purl)
image_ref = f"pkg:oci/edgegate@{version}?repository_url=ghcr.io/datum-cloud/edgegate&arch={arch}"
first = next(iter(boms.values()))
image = {
    "bomFormat": "CycloneDX",
    "specVersion": "1.5",
    "version": 1,
    "metadata": {
        "timestamp": first["metadata"].get("timestamp"),
        "tools": first["metadata"].get("tools"),
        "component": {"type": "container", "bom-ref": image_ref, "name": "ghcr.io/datum-cloud/edgegate",
                      "version": version, "purl": image_ref,
                      "properties": [{"name": "platform", "value": f"linux/{arch}"}]},
    },
    "components": [components[k] for k in sorted(components)],
    "dependencies": [{"ref": image_ref, "dependsOn": sorted(refs)}]
        + [{"ref": r, "dependsOn": sorted(d)} for r, d in sorted(dependencies.items())],
}
write(f"{out}/edgegate-image-{version}-linux-{arch}.cdx.json", image)
PY
done
