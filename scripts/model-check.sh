#!/usr/bin/env bash
# The model checker's deeper run (tests/model.rs `deeper`): the pure judges against the modelled
# world over HORIZON ticks (default 19: faults in the first 6, then the time to settle) with up to
# FAULTS faults on one path (default 1). Prints the states explored and how long it took; exits
# non-zero when a property breaks (with its counterexample) or the run does not finish.
#
#   scripts/model-check.sh            # 19 ticks, 1 fault
#   scripts/model-check.sh 16 2       # 16 ticks, 2 faults
set -euo pipefail
cd "$(dirname "$0")/.."
horizon=${1:-19}
faults=${2:-1}
EDGEGATE_MODEL_HORIZON=$horizon EDGEGATE_MODEL_FAULTS=$faults \
  cargo test -q --locked --test model deeper -- --ignored --nocapture 2>&1 | grep -v '^$'
