#!/usr/bin/env bash
# Gets CIFAR-10 into a data root; see scripts/get_data.py --help.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
exec "$(train_python)" "$REPO_ROOT/scripts/get_data.py" "$@"
