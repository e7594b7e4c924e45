#!/usr/bin/env bash
# Build promtool from the Prometheus Go module into a cache keyed by version (tests/go-tool.sh:
# safe to start several times at once, as the monitoring tests do). Prints the binary's path.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/../go-tool.sh" "$here" github.com/prometheus/prometheus github.com/prometheus/prometheus/cmd/promtool
