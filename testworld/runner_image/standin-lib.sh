# shellcheck shell=bash
# Shared by the config.sh and run.sh stand-ins (sourced, never run): state files, logging,
# signal-aware child processes and HTTP calls to the fake GitHub.
#
# Only bash, curl and coreutils (date, dirname, cat, rm, mkdir, sleep) are used: the
# stand-ins run in a minimal image built from the host's binaries.  Credentials travel to
# curl on its stdin (--config -), never on a command line, and are never printed.

set +x
set -uo pipefail

# The actions runner release these stand in for: the runner image's (deploy/images/runner/
# Dockerfile's FROM tag; tests/test_deploy_manifests.py keeps the two the same). Reported to
# GitHub on registration and with each listener session, as the real runner reports its own.
# shellcheck disable=SC2034 # used by the scripts that source this file
RUNNER_VERSION=2.336.0

STANDIN_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# What config.sh leaves for run.sh, in the runner's own directory like the real .runner.
# shellcheck disable=SC2034 # used by the scripts that source this file
RUNNER_FILE="${STANDIN_DIR}/.runner"
# shellcheck disable=SC2034 # used by the scripts that source this file
CREDENTIALS_FILE="${STANDIN_DIR}/.credentials"
HTTP_SCRATCH="${STANDIN_DIR}/.http.$$"
HTTP_MAX_TIME="${HTTP_MAX_TIME:-30}"

log() {
    printf '%s %s: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "${STANDIN_NAME:-runner}" "$*" >&2
}

stopping=0
child=0
# When set, a signal also stops the current child (a long poll, a job); cleanup calls made
# after a signal run with it unset, so they are not cut short.
interruptible=0

# shellcheck disable=SC2329 # invoked by the traps the scripts set
on_signal() {
    stopping=1
    if [[ "${child}" -ne 0 && "${interruptible}" -eq 1 ]]; then
        kill -TERM "${child}" 2>/dev/null || true
    fi
}

# Waits for the background process $child, also across trapped signals (wait returns early
# when a trap runs; bash would defer the trap for a foreground command). Sets child_status.
wait_child() {
    if [[ "${stopping}" -eq 1 && "${interruptible}" -eq 1 ]]; then
        kill -TERM "${child}" 2>/dev/null || true
    fi
    while :; do
        wait "${child}"
        if kill -0 "${child}" 2>/dev/null; then
            continue
        fi
        break
    done
    # Once more for its own exit status: the wait above may have been cut short by a trap.
    wait "${child}"
    # shellcheck disable=SC2034 # read by the scripts that source this library
    child_status=$?
    child=0
}

# http METHOD URL AUTHORIZATION [curl options...]
# Sets http_status (000 when nothing answered) and http_body.
http() {
    local method="$1" url="$2" authorization="$3"
    shift 3
    rm -f "${HTTP_SCRATCH}" "${HTTP_SCRATCH}.code"
    printf 'header = "Authorization: %s"\n' "${authorization}" |
        curl --silent --config - --max-time "${HTTP_MAX_TIME}" --request "${method}" \
            --output "${HTTP_SCRATCH}" --write-out '%{http_code}' "$@" "${url}" \
            >"${HTTP_SCRATCH}.code" 2>/dev/null &
    child=$!
    wait_child
    http_status="$(cat "${HTTP_SCRATCH}.code" 2>/dev/null)"
    [[ "${http_status}" =~ ^[0-9]{3}$ ]] || http_status=000
    http_body="$(cat "${HTTP_SCRATCH}" 2>/dev/null)"
    rm -f "${HTTP_SCRATCH}" "${HTTP_SCRATCH}.code"
}

# value_of KEY TEXT: the value of a key=value line.
value_of() {
    local key="$1" line
    local -a lines
    IFS=$'\n' read -r -d '' -a lines <<<"$2"
    for line in "${lines[@]}"; do
        if [[ "${line%%=*}" == "${key}" ]]; then
            printf '%s' "${line#*=}"
            return 0
        fi
    done
    return 1
}

# json_string KEY JSON: a top-level string field of a flat JSON object.
json_string() {
    local pattern="\"$1\"[[:space:]]*:[[:space:]]*\"([^\"]*)\""
    [[ "$2" =~ ${pattern} ]] || return 1
    printf '%s' "${BASH_REMATCH[1]}"
}

# The message of an error answer (key=value or GitHub JSON), for logs.
error_message() {
    value_of message "${http_body}" || json_string message "${http_body}" || printf 'HTTP %s' "${http_status}"
}
