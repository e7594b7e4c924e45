//go:build tools

// Package tools pins promtool, which tests/monitoring.rs runs on deploy/components/monitoring.
package tools

import _ "github.com/prometheus/prometheus/cmd/promtool"
