# Sourced by the config.sh and run.sh stubs used by tests/test_runner_entrypoint.py.
# shellcheck shell=bash
#
# STUB_NAME is "config" or "run". Every stub invocation records its working directory and
# arguments (one per line) under $STUB_LOG_DIR. Behaviour, per stub (NAME = CONFIG | RUN):
#   STUB_<NAME>_BLOCK=1      print "stub <name> started" and block until SIGTERM; on SIGTERM
#                            record it in <name>.signal and exit with STUB_<NAME>_TERM_EXIT
#                            (default 0)
#   STUB_<NAME>_EXIT=N       otherwise print the marker and exit with N (default 0)
set -u

stub_main() {
    local upper log block exit_code term_exit sleeper=0
    upper="$(printf '%s' "${STUB_NAME}" | tr '[:lower:]' '[:upper:]')"
    log="${STUB_LOG_DIR:?STUB_LOG_DIR must be set}"
    block="STUB_${upper}_BLOCK"
    exit_code="STUB_${upper}_EXIT"
    term_exit="STUB_${upper}_TERM_EXIT"

    pwd >"${log}/${STUB_NAME}.cwd"
    printf '%s\n' "$@" >"${log}/${STUB_NAME}.args"

    if [[ "${!block:-0}" == 1 ]]; then
        # shellcheck disable=SC2064 # expand now: the values are fixed for this process
        trap "echo TERM >'${log}/${STUB_NAME}.signal'; kill \"\${sleeper}\" 2>/dev/null; exit ${!term_exit:-0}" TERM
        echo "stub ${STUB_NAME} started"
        while :; do
            sleep 60 &
            sleeper=$!
            wait "${sleeper}"
        done
    fi
    echo "stub ${STUB_NAME} started"
    exit "${!exit_code:-0}"
}
