#!/usr/bin/env bash
# Build cosign (sigstore's signing CLI) from its Go module into a cache keyed by version
# (tests/go-tool.sh: safe to start several times at once). Prints the binary's path. Only
# scripts/release.sh needs it; cold, about N minutes on 2 cores.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/../go-tool.sh" "$here" github.com/sigstore/cosign/v2 github.com/sigstore/cosign/v2/cmd/cosign
