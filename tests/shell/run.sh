#!/usr/bin/env bash
# Stand-in for the actions runner's run.sh (see stub-common.sh).
STUB_NAME=run
# shellcheck source=tests/shell/stub-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/stub-common.sh"
stub_main "$@"
