# Sourced by the config.sh and run.sh stubs used by tests/test_runner_entrypoint.py.
# shellcheck shell=bash
#
# STUB_NAME is "config" or "run". Every stub invocation records its working directory,
# arguments (one per line) and SSL_CERT_FILE under $STUB_LOG_DIR. Behaviour, per stub (NAME = CONFIG | RUN):
#   STUB_<NAME>_BLOCK=1      print "stub <name> started" and block until SIGTERM; on SIGTERM
#                            record it in <name>.signal and exit with STUB_<NAME>_TERM_EXIT
#                            (default 0)
#   STUB_<NAME>_WORKER=S     like the real listener running a job: start a process named
#                            Runner.Worker that lives S seconds, print "stub <name> started"
#                            and "stub <name> job started", and exit with STUB_<NAME>_EXIT once
#                            the worker has ended ("stub <name> job done"); SIGTERM meanwhile is
#                            recorded as with _BLOCK, the worker stopped, exit _TERM_EXIT
#   STUB_<NAME>_EXIT=N       otherwise print the marker and exit with N (default 0)
#   STUB_<NAME>_SAYS=TEXT    before that, print TEXT on stderr (a runner's last words)
#   STUB_<NAME>_WRITES="F G" first write each file F, G (mode 600) in the working directory,
#                            as config.sh leaves .runner and .credentials
#   STUB_<NAME>_LINGERS=S    print the marker, then wait S seconds before that exit
#   STUB_<NAME>_LEAVES=S     on exit, leave behind a process that holds the stub's output open
#                            for S seconds (a runner's leftover child)
set -u

stub_main() {
    local upper log block worker exit_code term_exit writes says leaves lingers file sleeper=0
    upper="$(printf '%s' "${STUB_NAME}" | tr '[:lower:]' '[:upper:]')"
    log="${STUB_LOG_DIR:?STUB_LOG_DIR must be set}"
    block="STUB_${upper}_BLOCK"
    worker="STUB_${upper}_WORKER"
    exit_code="STUB_${upper}_EXIT"
    term_exit="STUB_${upper}_TERM_EXIT"
    writes="STUB_${upper}_WRITES"

    pwd >"${log}/${STUB_NAME}.cwd"
    printf '%s\n' "$@" >"${log}/${STUB_NAME}.args"
    printf '%s' "${SSL_CERT_FILE:-}" >"${log}/${STUB_NAME}.ssl_cert_file"
    for file in ${!writes:-}; do
        (umask 077 && printf '%s of %s\n' "${file}" "${POD_NAME:-}" >"${file}")
    done

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
    if [[ -n "${!worker:-}" ]]; then
        # shellcheck disable=SC2064 # expand now: the values are fixed for this process
        trap "echo TERM >'${log}/${STUB_NAME}.signal'; kill \"\${sleeper}\" 2>/dev/null; exit ${!term_exit:-0}" TERM
        (exec -a Runner.Worker sleep "${!worker}") &
        sleeper=$!
        # Say so only once the worker is visible under its name (the fork has exec'd).
        local argv0=""
        until [[ "${argv0##*/}" == Runner.Worker ]] || ! kill -0 "${sleeper}" 2>/dev/null; do
            IFS= read -r -d '' argv0 <"/proc/${sleeper}/cmdline" 2>/dev/null || argv0=""
        done
        echo "stub ${STUB_NAME} started"
        echo "stub ${STUB_NAME} job started"
        while kill -0 "${sleeper}" 2>/dev/null; do
            wait "${sleeper}"
        done
        echo "stub ${STUB_NAME} job done"
        exit "${!exit_code:-0}"
    fi
    says="STUB_${upper}_SAYS"
    [[ -z "${!says:-}" ]] || printf '%s\n' "${!says}" >&2
    leaves="STUB_${upper}_LEAVES"
    [[ -z "${!leaves:-}" ]] || sleep "${!leaves}" &
    echo "stub ${STUB_NAME} started"
    lingers="STUB_${upper}_LINGERS"
    [[ -z "${!lingers:-}" ]] || sleep "${!lingers}"
    exit "${!exit_code:-0}"
}
