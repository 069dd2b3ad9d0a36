#!/usr/bin/env bash
# Entrypoint of a RunnerPool runner pod.
#
# Registers one ephemeral self-hosted GitHub Actions runner with the registration
# token that the operator keeps in the pod's token Secret, then runs the listener.
# SIGTERM/SIGINT are forwarded to the child so that a deleted pod exits cleanly.
#
# Environment (set by the operator's Deployment):
#   POD_NAME            runner name (required)
#   RUNNER_ORG          organization scope  } exactly one of the two
#   RUNNER_REPO         repository scope, owner/name }
#   RUNNER_LABELS       comma-separated labels, including <namespace>/<pool> (required)
#   GITHUB_URL          web base URL for config.sh --url (default https://github.com)
#   RUNNER_WORKDIR      job work directory (default /runner/_work)
#   RUNNER_TOKEN_FILE   token file (default /runner-token/runnertoken)
#   RUNNER_DIR          directory holding config.sh and run.sh (default /home/runner)
#   RUNNER_STATE_FILE   marks a pod that already registered once (default in the work
#                       volume, which outlives container restarts but not the pod)
#
# One job per pod: the runner is --ephemeral, so after its job the listener exits and the
# container restarts. A restarted container must not register again (its work directory is
# no longer clean, and a job could land on a pod the operator is about to replace): it exits
# at once, and the operator replaces the pod.
#
# The registration token is secret: this script never traces itself and never prints it.

# Tracing would print the token; turn it off even if the caller ran `bash -x`.
set +x
set -uo pipefail

log() {
    printf '%s runner-entrypoint: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >&2
}

die() {
    log "error: $*"
    exit 1
}

RUNNER_DIR="${RUNNER_DIR:-/home/runner}"
RUNNER_TOKEN_FILE="${RUNNER_TOKEN_FILE:-/runner-token/runnertoken}"
GITHUB_URL="${GITHUB_URL:-https://github.com}"
GITHUB_URL="${GITHUB_URL%/}"
RUNNER_WORKDIR="${RUNNER_WORKDIR:-/runner/_work}"
RUNNER_STATE_FILE="${RUNNER_STATE_FILE:-${RUNNER_WORKDIR}/.runnerpool-registered}"
# Make the official run.sh pass our SIGTERM on to the listener as SIGINT (graceful stop).
export RUNNER_MANUALLY_TRAP_SIG="${RUNNER_MANUALLY_TRAP_SIG:-1}"

[[ -n "${POD_NAME:-}" ]] || die "POD_NAME is not set"
[[ -n "${RUNNER_LABELS:-}" ]] || die "RUNNER_LABELS is not set"

if [[ -n "${RUNNER_ORG:-}" && -n "${RUNNER_REPO:-}" ]]; then
    die "RUNNER_ORG and RUNNER_REPO are both set; set exactly one"
elif [[ -n "${RUNNER_ORG:-}" ]]; then
    scope="${RUNNER_ORG}"
    [[ "${scope}" != */* ]] || die "RUNNER_ORG must be an organization name, got '${scope}'"
elif [[ -n "${RUNNER_REPO:-}" ]]; then
    scope="${RUNNER_REPO}"
    [[ "${scope}" =~ ^[^/]+/[^/]+$ ]] || die "RUNNER_REPO must be owner/name, got '${scope}'"
else
    die "neither RUNNER_ORG nor RUNNER_REPO is set; set exactly one"
fi

if [[ -e "${RUNNER_STATE_FILE}" ]]; then
    log "this pod already registered a runner once; exiting so the operator replaces it"
    exit 0
fi

[[ -e "${RUNNER_TOKEN_FILE}" ]] || die "registration token file ${RUNNER_TOKEN_FILE} does not exist (is the token Secret mounted?)"
[[ -r "${RUNNER_TOKEN_FILE}" ]] || die "registration token file ${RUNNER_TOKEN_FILE} is not readable"
token="$(tr -d '[:space:]' <"${RUNNER_TOKEN_FILE}")" || die "cannot read registration token file ${RUNNER_TOKEN_FILE}"
[[ -n "${token}" ]] || die "registration token file ${RUNNER_TOKEN_FILE} is empty (the operator has not issued a token yet)"

cd "${RUNNER_DIR}" || die "runner directory ${RUNNER_DIR} does not exist"
[[ -x ./config.sh ]] || die "${RUNNER_DIR}/config.sh is missing or not executable"
[[ -x ./run.sh ]] || die "${RUNNER_DIR}/run.sh is missing or not executable"

child=0
terminating=0

# shellcheck disable=SC2329 # invoked by the trap below
on_signal() {
    terminating=1
    log "termination requested; stopping the runner"
    if [[ "${child}" -ne 0 ]]; then
        kill -TERM "${child}" 2>/dev/null || true
    fi
}
trap on_signal TERM INT

# Runs "$@" in the background and waits for it, so that a signal that arrives meanwhile is
# handled at once (bash defers traps while a foreground command runs). Sets child_status.
run_child() {
    "$@" &
    child=$!
    # A signal that came between the fork and the line above found no child to stop.
    if [[ "${terminating}" -eq 1 ]]; then
        kill -TERM "${child}" 2>/dev/null || true
    fi
    while :; do
        wait "${child}"
        child_status=$?
        # wait returns early (status > 128) when a trapped signal arrives; keep waiting for the
        # child itself once it has been told to stop.
        if [[ "${terminating}" -eq 1 ]] && kill -0 "${child}" 2>/dev/null; then
            continue
        fi
        break
    done
    child=0
}

if ! { mkdir -p "$(dirname "${RUNNER_STATE_FILE}")" && : >"${RUNNER_STATE_FILE}"; }; then
    die "cannot write ${RUNNER_STATE_FILE} (is the work volume mounted and writable?)"
fi
log "registering runner ${POD_NAME} for ${GITHUB_URL}/${scope} with labels ${RUNNER_LABELS}"
run_child ./config.sh --unattended --ephemeral --replace \
    --name "${POD_NAME}" \
    --labels "${RUNNER_LABELS}" \
    --url "${GITHUB_URL}/${scope}" \
    --token "${token}" \
    --work "${RUNNER_WORKDIR}" \
    --disableupdate
unset token
if [[ "${terminating}" -eq 1 ]]; then
    log "stopped during registration"
    exit 0
fi
if [[ "${child_status}" -ne 0 ]]; then
    die "config.sh failed with exit code ${child_status}"
fi

log "starting the runner listener"
run_child ./run.sh
if [[ "${terminating}" -eq 1 ]]; then
    log "runner stopped (run.sh exit code ${child_status})"
    exit 0
fi
log "runner exited with code ${child_status}"
exit "${child_status}"
