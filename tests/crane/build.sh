#!/usr/bin/env bash
# Build crane (go-containerregistry's CLI) from its Go module into a cache keyed by version
# (tests/go-tool.sh: safe to start several times at once). Prints the binary's path. The version
# is the one tests/image builds the image with (go.mod beside this script).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/../go-tool.sh" "$here" github.com/google/go-containerregistry github.com/google/go-containerregistry/cmd/crane
