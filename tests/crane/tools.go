//go:build tools

// Package tools pins crane (go-containerregistry's CLI, the version tests/image builds images
// with) for tests/crane/build.sh: scripts/release.sh and tests/system/tests/release.rs read an
// image archive's digest with it, and the release's push command is `crane push`.
package tools

import _ "github.com/google/go-containerregistry/cmd/crane"
