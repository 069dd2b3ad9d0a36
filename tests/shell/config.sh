#!/usr/bin/env bash
# Stand-in for the actions runner's config.sh (see stub-common.sh).
STUB_NAME=config
# shellcheck source=tests/shell/stub-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/stub-common.sh"
stub_main "$@"
