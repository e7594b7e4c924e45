//go:build tools

// Package tools pins cosign (sigstore's signing CLI) for tests/cosign/build.sh: scripts/release.sh
// signs the image and the SBOMs with it and runs the `cosign verify` docs/from-source.md shows.
package tools

import _ "github.com/sigstore/cosign/v2/cmd/cosign"
