#!/usr/bin/env bash
# Entrypoint of a RunnerPool runner pod, in two phases, one per container:
#
#   runnerpool-runner-entrypoint register   the pod's init container: registers one ephemeral
#                                           self-hosted runner and writes the runner's own
#                                           configuration to RUNNER_CONFIG_DIR
#   runnerpool-runner-entrypoint [run]      the runner container: restores that configuration
#                                           and runs the listener
#
# Why two containers: the registration credential is pool-wide (a registration token registers
# any number of runners for its repository or organization). Only the init container mounts it,
# and it has ended before the runner container, where jobs run, starts; what the runner container
# gets is the runner's own configuration (.runner, .credentials, .credentials_rsaparams: one
# runner's identity, useless for registering another), through an emptyDir.
#
# Registration (RUNNER_REGISTRATION):
#   token (default)  config.sh with the registration token in RUNNER_TOKEN_FILE (the pool's token
#                    Secret); the files config.sh wrote are copied to RUNNER_CONFIG_DIR
#   jit              the pod's own just-in-time runner config (RUNNER_JITCONFIG_FILE, the pod's
#                    JIT Secret) is copied to RUNNER_CONFIG_DIR; the run phase reads it, deletes
#                    it and passes it to run.sh --jitconfig (GitHub accepts it once)
#
# SIGTERM/SIGINT (the pod is deleted, evicted or its node shuts down): an idle runner, or one
# still registering, gets the signal at once and exits cleanly. A runner running a job does
# not: the job is left to finish (an ephemeral runner exits after its one job, which ends
# the pod) for up to RUNNER_BUSY_GRACE_SECONDS; only then is the signal passed on, and the
# runner cancels its job. A second signal while waiting is passed on at once (whoever sent
# it wants the pod gone now, e.g. `kubectl delete pod --grace-period=1`). "Running a job"
# is what the real runner shows: its listener starts a Runner.Worker process for each job.
# The pod's terminationGracePeriodSeconds must be longer than the busy grace (the operator
# sets it so), or the kubelet's SIGKILL ends the job first. Each decision is logged.
#
# Environment (set by the operator's pod template):
#   POD_NAME            runner name (required)
#   RUNNER_ENTERPRISE   enterprise scope, its slug    }
#   RUNNER_ORG          organization scope            } exactly one of the three (register
#   RUNNER_REPO         repository scope, owner/name  } phase, token mode)
#   RUNNER_GROUP        runner group name (organization and enterprise scope; default: the
#                       scope's default group)
#   RUNNER_LABELS       comma-separated labels, including <namespace>/<pool> (register, token)
#   GITHUB_URL          web base URL for config.sh --url (default https://github.com)
#   RUNNER_WORKDIR      job work directory (default /runner/_work); also holds the pod's
#                       markers on disk (see "One job per pod")
#   RUNNER_REGISTRATION token (default) or jit
#   RUNNER_TOKEN_FILE   token file (default /runner-token/runnertoken; register phase only)
#   RUNNER_JITCONFIG_FILE  the pod's JIT config (default /runner-jitconfig/jitconfig; register, jit)
#   RUNNER_CONFIG_DIR   the volume both containers share (default /runner-config)
#   RUNNER_DIR          directory holding config.sh and run.sh (default /home/runner)
#   RUNNER_STATE_FILE   marks a pod whose runner already started once (default in
#                       RUNNER_CONFIG_DIR, which outlives container restarts but not the pod)
#   RUNNER_BUSY_GRACE_SECONDS  how long a busy runner's job may go on after SIGTERM before
#                       it is cancelled (default 3600; 0 cancels at once)
#   RUNNER_DOCKER_WAIT_SECONDS  containerMode dind: wait at most this long for the Docker
#                       daemon at DOCKER_HOST before starting the runner (run phase; default 0:
#                       no wait)
#
# One job per pod: the runner is ephemeral, so after its job the listener exits and the
# pod ends. A restarted runner container (it failed) must not run a runner again (its work
# directory is no longer clean, and a job could land on a pod the operator is about to
# replace): it exits 0 at once, and the operator replaces the pod. The init container runs
# once per pod sandbox; if the sandbox is made again, it finds the runner registered already
# and leaves the configuration as it is.
#
# Both markers ("registered", "started") are kept twice: in RUNNER_CONFIG_DIR and on the work
# volume (RUNNER_WORKDIR). RUNNER_CONFIG_DIR is memory (a tmpfs, so the runner's credential
# never lands on the node's disk), and a node reboot empties it; the work volume is on disk (an
# emptyDir or the pool's claim) and keeps the previous job's files through the reboot, after
# which the kubelet runs the init container and the runner container (restartPolicy OnFailure)
# again. Either marker found in either place stops the phase: without the disk copy a rebooted
# pod would register a second runner and run it in the used work directory. A pod whose
# configuration went with its memory exits 0 too, and the operator replaces it. Only the
# markers go to disk, never the configuration.
#
# Last words: the container's termination message (/dev/termination-log, the pod's default
# terminationMessagePath, which the kubelet creates) says why it ended: the last lines the
# runner (config.sh in the register phase, run.sh in the run phase) printed and the
# entrypoint's own reason ("runner exited with code 7", or its error). `kubectl describe pod`
# shows it, and the operator reads it: a runner GitHub refuses as outdated ("Runner version
# v2.x is deprecated and cannot receive messages.") makes the pool back off and say so
# (docs/registration.md, "Runner version"). The runner's stdout and stderr pass through to the
# container's stdout on their way. RUNNER_TERMINATION_LOG overrides the path (tests).
#
# Credentials are secret: this script never traces itself and never prints them.

# Tracing would print credentials; turn it off even if the caller ran `bash -x`.
set +x
set -uo pipefail

log() {
    printf '%s runner-entrypoint: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >&2
}

die() {
    log "error: $*"
    last_words "runner-entrypoint: error: $*"
    exit 1
}

PHASE="${1:-run}"
RUNNER_DIR="${RUNNER_DIR:-/home/runner}"
RUNNER_REGISTRATION="${RUNNER_REGISTRATION:-token}"
RUNNER_TOKEN_FILE="${RUNNER_TOKEN_FILE:-/runner-token/runnertoken}"
RUNNER_JITCONFIG_FILE="${RUNNER_JITCONFIG_FILE:-/runner-jitconfig/jitconfig}"
RUNNER_CONFIG_DIR="${RUNNER_CONFIG_DIR:-/runner-config}"
GITHUB_URL="${GITHUB_URL:-https://github.com}"
GITHUB_URL="${GITHUB_URL%/}"
RUNNER_WORKDIR="${RUNNER_WORKDIR:-/runner/_work}"
RUNNER_STATE_FILE="${RUNNER_STATE_FILE:-${RUNNER_CONFIG_DIR}/.runnerpool-started}"
# Written last by the register phase: the configuration in RUNNER_CONFIG_DIR is complete.
REGISTERED_FILE="${RUNNER_CONFIG_DIR}/.runnerpool-registered"
# Their copies on the disk-backed work volume, which outlive a node reboot ("One job per pod").
# Named after the pod: a work volume of the pool's (spec.workVolume) may be a claim that outlives
# the pod or that pods share, and another pod's markers would stop this one from ever registering.
DISK_REGISTERED_FILE="${RUNNER_WORKDIR}/.runnerpool-registered-${POD_NAME:-}"
DISK_STARTED_FILE="${RUNNER_WORKDIR}/.runnerpool-started-${POD_NAME:-}"
# What config.sh leaves in the runner directory that run.sh needs: the runner's settings, its
# own credential and key, and the environment config.sh recorded for jobs.
RUNNER_CONFIG_FILES=(.runner .credentials .credentials_rsaparams .env .path)
JITCONFIG_NAME=jitconfig
# Make the official run.sh pass our SIGTERM on to the listener as SIGINT (graceful stop).
export RUNNER_MANUALLY_TRAP_SIG="${RUNNER_MANUALLY_TRAP_SIG:-1}"
BUSY_GRACE="${RUNNER_BUSY_GRACE_SECONDS:-3600}"
TERMINATION_LOG="${RUNNER_TERMINATION_LOG:-/dev/termination-log}"
# The runner's last lines of output, kept by keep_tail for last_words (one file per phase: the
# run container must not report what config.sh said).
OUTPUT_TAIL="${RUNNER_CONFIG_DIR}/.runnerpool-output-tail.${PHASE}"
TAIL_LINES=30
# The kubelet keeps 4096 bytes of a termination message; the end is what matters.
TERMINATION_MAX=4000

# last_words TEXT: the termination message: the runner's last lines and TEXT. Written only where
# the kubelet made the file (outside a pod there is no such file, and none is created).
last_words() {
    [[ -e "${TERMINATION_LOG}" ]] || return 0
    local LC_ALL=C text=""
    [[ -r "${OUTPUT_TAIL}" ]] && text="$(<"${OUTPUT_TAIL}")"
    text="${text:+${text}$'\n'}$*"
    [[ "${#text}" -le "${TERMINATION_MAX}" ]] || text="${text: -${TERMINATION_MAX}}"
    { printf '%s\n' "${text}" >"${TERMINATION_LOG}"; } 2>/dev/null || true
}

[[ "${PHASE}" == register || "${PHASE}" == run ]] || die "unknown phase '${PHASE}' (register or run)"
[[ "${RUNNER_REGISTRATION}" == token || "${RUNNER_REGISTRATION}" == jit ]] ||
    die "RUNNER_REGISTRATION must be token or jit, got '${RUNNER_REGISTRATION}'"
[[ -n "${POD_NAME:-}" ]] || die "POD_NAME is not set"
[[ "${BUSY_GRACE}" =~ ^[0-9]+$ ]] || die "RUNNER_BUSY_GRACE_SECONDS must be whole seconds, got '${BUSY_GRACE}'"

# Sets scope, the path below GITHUB_URL that config.sh --url names, from exactly one of
# RUNNER_ENTERPRISE (enterprises/<slug>), RUNNER_ORG (<org>) and RUNNER_REPO (<owner>/<name>),
# and runner_group_args from RUNNER_GROUP (organization and enterprise runners): the runner
# group config.sh puts the runner in.
resolve_scope() {
    local set_vars=() name
    for name in RUNNER_ENTERPRISE RUNNER_ORG RUNNER_REPO; do
        [[ -n "${!name:-}" ]] && set_vars+=("${name}")
    done
    [[ "${#set_vars[@]}" -le 1 ]] || die "${set_vars[*]} are all set; set exactly one of RUNNER_ENTERPRISE, RUNNER_ORG and RUNNER_REPO"
    [[ "${#set_vars[@]}" -eq 1 ]] || die "none of RUNNER_ENTERPRISE, RUNNER_ORG and RUNNER_REPO is set; set exactly one"
    scope="${!set_vars[0]}"
    case "${set_vars[0]}" in
        RUNNER_ENTERPRISE)
            [[ "${scope}" != */* ]] || die "RUNNER_ENTERPRISE must be an enterprise slug, got '${scope}'"
            scope="enterprises/${scope}"
            ;;
        RUNNER_ORG) [[ "${scope}" != */* ]] || die "RUNNER_ORG must be an organization name, got '${scope}'" ;;
        RUNNER_REPO) [[ "${scope}" =~ ^[^/]+/[^/]+$ ]] || die "RUNNER_REPO must be owner/name, got '${scope}'" ;;
    esac
    runner_group_args=()
    [[ -z "${RUNNER_GROUP:-}" ]] || runner_group_args=(--runnergroup "${RUNNER_GROUP}")
}

# read_secret_file FILE WHAT: the file's content without whitespace, in `secret`.
read_secret_file() {
    local file="$1" what="$2"
    [[ -e "${file}" ]] || die "${what} file ${file} does not exist (is its Secret mounted?)"
    [[ -r "${file}" ]] || die "${what} file ${file} is not readable"
    secret="$(tr -d '[:space:]' <"${file}")" || die "cannot read ${what} file ${file}"
    [[ -n "${secret}" ]] || die "${what} file ${file} is empty (the operator has not issued it yet)"
}

cd "${RUNNER_DIR}" || die "runner directory ${RUNNER_DIR} does not exist"
[[ "${RUNNER_REGISTRATION}" == jit || -x ./config.sh ]] || die "${RUNNER_DIR}/config.sh is missing or not executable"
[[ -x ./run.sh ]] || die "${RUNNER_DIR}/run.sh is missing or not executable"
[[ -d "${RUNNER_CONFIG_DIR}" && -w "${RUNNER_CONFIG_DIR}" ]] ||
    die "${RUNNER_CONFIG_DIR} is not a writable directory (is the runner-config volume mounted?)"

child=0
# The descriptor start_child sends the child's output to (run_captured sets it); empty: inherited.
child_output=""
# What the child is: "registration" (config.sh), "docker" (the wait for the Docker daemon)
# or "listener" (run.sh).
phase=""
terminating=0
# The signal has been passed on to the child.
forwarded=0
# A sleep timing the busy grace while a signalled runner finishes its job; 0 when none.
grace_timer=0

# Whether the listener is running a job: a Runner.Worker process (the real listener starts
# one per job, bin/Runner.Worker) among this script's descendants. Only bash builtins and
# /proc: the image need not have pgrep. Descendants only, so that another runner's worker
# on the same machine (a test sandbox, a pod sharing its PID namespace) does not count.
# shellcheck disable=SC2329 # invoked by on_signal, the trap below
running_job() {
    local stat pid ppid rest argv0
    local -A parent_of=()
    local -a workers=()
    for stat in /proc/[0-9]*/stat; do
        pid="${stat#/proc/}"
        pid="${pid%/stat}"
        { read -r rest <"${stat}"; } 2>/dev/null || continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        rest="${rest##*) }"
        ppid="${rest#* }"
        parent_of[${pid}]="${ppid%% *}"
        { IFS= read -r -d '' argv0 <"/proc/${pid}/cmdline"; } 2>/dev/null || continue
        [[ "${argv0##*/}" == Runner.Worker ]] && workers+=("${pid}")
    done
    for pid in "${workers[@]}"; do
        while [[ -n "${pid}" && "${pid}" != 0 ]]; do
            [[ "${pid}" == "$$" ]] && return 0
            pid="${parent_of[${pid}]:-}"
        done
    done
    return 1
}

forward() {
    forwarded=1
    kill -TERM "${child}" 2>/dev/null || true
}

# shellcheck disable=SC2329 # invoked by the trap below
on_signal() {
    if [[ "${terminating}" -eq 1 ]]; then
        # (Not when the runner has just ended: its job is done, nothing is cancelled.)
        if [[ "${forwarded}" -eq 0 && "${child}" -ne 0 ]] && kill -0 "${child}" 2>/dev/null; then
            log "termination requested again while the job runs; stopping the runner now (the job is cancelled)"
            forward
        fi
        return
    fi
    terminating=1
    if [[ "${child}" -eq 0 ]]; then
        # Between two steps: start_child passes it on to the next one, which is not busy yet.
        log "termination requested; stopping the runner"
    elif [[ "${phase}" == listener ]] && running_job; then
        if [[ "${BUSY_GRACE}" -eq 0 ]]; then
            log "termination requested while the runner runs a job; RUNNER_BUSY_GRACE_SECONDS is 0: stopping the runner now (the job is cancelled)"
            forward
        else
            log "termination requested while the runner runs a job; letting the job finish (at most ${BUSY_GRACE}s, RUNNER_BUSY_GRACE_SECONDS)"
            sleep "${BUSY_GRACE}" &
            grace_timer=$!
        fi
    else
        log "termination requested while the runner is idle; stopping the runner"
        forward
    fi
}
trap on_signal TERM INT

# start_child CMD...: runs CMD in the background (its output to child_output, if set) and makes
# it the child a signal stops. Run in the background and waited for, so that a signal that
# arrives meanwhile is handled at once (bash defers traps while a foreground command runs).
start_child() {
    if [[ -n "${child_output}" ]]; then
        "$@" >&"${child_output}" 2>&1 &
    else
        "$@" &
    fi
    child=$!
    # A signal that came between the fork and the line above found no child to stop: the
    # child has only just started, so it is not running a job.
    if [[ "${terminating}" -eq 1 && "${forwarded}" -eq 0 ]]; then
        forward
    fi
}

# await_child: returns once the child has ended, and ends the busy grace's timer.
await_child() {
    # wait returns early (status > 128) when a trapped signal arrives, and wait -n also when
    # the busy grace runs out; keep waiting for the child itself until it has ended. (wait -n
    # with pids needs bash 5.1: the runner image's Ubuntu 22.04 has it.)
    while kill -0 "${child}" 2>/dev/null; do
        if [[ "${grace_timer}" -ne 0 ]]; then
            wait -n "${child}" "${grace_timer}"
            if ! kill -0 "${grace_timer}" 2>/dev/null && kill -0 "${child}" 2>/dev/null; then
                grace_timer=0
                log "the job still runs after ${BUSY_GRACE}s (RUNNER_BUSY_GRACE_SECONDS); stopping the runner (the job is cancelled)"
                forward
            fi
        else
            wait "${child}"
        fi
    done
    if [[ "${grace_timer}" -ne 0 ]]; then
        log "the runner finished its job and exited while termination was pending"
        kill "${grace_timer}" 2>/dev/null || true
        wait "${grace_timer}" 2>/dev/null
        grace_timer=0
    fi
}

# collect_child: sets child_status, the ended child's exit code. Called once this script has no
# other child left (the busy grace's timer ended, the output's reader gone): a trapped signal
# that arrives in the instant bash reaps the child makes bash lose its status (the trap jumps
# out of bash's waitpid), and this wait then blocks until every other child has ended; with
# none left it answers -1 at once. Seen in the test world as a pod whose idle runner exited
# as it was signalled, Terminating for its whole grace period: the wait was held by the output
# reader, whose pipe the waiting script itself kept open.
collect_child() {
    wait "${child}"
    child_status=$?
    child=0
}

# run_child CMD...: runs CMD as the child and waits until it has ended. Sets child_status.
run_child() {
    start_child "$@"
    await_child
    collect_child
}

# keep_tail FILE: copies its input to stdout and leaves its last TAIL_LINES lines in FILE when it
# ends. Bash only (the test world's image has no tee); signals are the entrypoint's business, so
# the copy goes on until the runner's output ends.
# shellcheck disable=SC2329 # invoked by run_captured, in a process substitution
keep_tail() {
    trap '' TERM INT
    local line
    local -a kept=()
    while IFS= read -r line || [[ -n "${line}" ]]; do
        printf '%s\n' "${line}"
        kept+=("${line}")
        [[ "${#kept[@]}" -le "${TAIL_LINES}" ]] || kept=("${kept[@]:1}")
    done
    : >"$1"
    [[ "${#kept[@]}" -eq 0 ]] || printf '%s\n' "${kept[@]}" >"$1"
}

# run_captured CMD...: as run_child, with the child's output kept for last_words as it passes.
run_captured() {
    local out reader waited=0
    rm -f "${OUTPUT_TAIL}"
    exec {out}> >(keep_tail "${OUTPUT_TAIL}")
    reader=$!
    child_output="${out}"
    start_child "$@"
    child_output=""
    # The child has its own copy: the copy ends once the runner's output does.
    exec {out}>&-
    await_child
    # A leftover process of the runner holding its output open must not hold the container
    # (nor collect_child, see there), so the reader gets 2 s at most.
    while kill -0 "${reader}" 2>/dev/null && [[ "${waited}" -lt 20 ]]; do
        sleep 0.1
        waited=$((waited + 1))
    done
    # Only a reader still there (it ignores SIGTERM): one that ended may have left its PID to another.
    if [[ "${waited}" -ge 20 ]] && kill -0 "${reader}" 2>/dev/null; then
        kill -KILL "${reader}" 2>/dev/null || true
    fi
    collect_child
}

# mark WHERE FILE...: creates each marker FILE (and its directory), or dies naming WHERE, the
# volume that should hold it.
mark() {
    local where="$1" file
    shift
    for file in "$@"; do
        { mkdir -p "$(dirname "${file}")" && : >"${file}"; } 2>/dev/null ||
            die "cannot write ${file} (is the ${where} volume mounted and writable?)"
    done
}

# --- register: the init container ----------------------------------------------------------

register_with_token() {
    [[ -n "${RUNNER_LABELS:-}" ]] || die "RUNNER_LABELS is not set"
    resolve_scope
    local secret token file
    read_secret_file "${RUNNER_TOKEN_FILE}" "registration token"
    token="${secret}"
    unset secret
    log "registering runner ${POD_NAME} for ${GITHUB_URL}/${scope} with labels ${RUNNER_LABELS}"
    phase=registration
    run_captured ./config.sh --unattended --ephemeral --replace \
        --name "${POD_NAME}" \
        --labels "${RUNNER_LABELS}" \
        --url "${GITHUB_URL}/${scope}" \
        --token "${token}" \
        --work "${RUNNER_WORKDIR}" \
        "${runner_group_args[@]}" \
        --disableupdate
    unset token
    if [[ "${terminating}" -eq 1 ]]; then
        log "stopped during registration"
        exit 0
    fi
    [[ "${child_status}" -eq 0 ]] || die "config.sh failed with exit code ${child_status}"
    for file in "${RUNNER_CONFIG_FILES[@]}"; do
        if [[ -e "${file}" ]]; then
            cp -p "${file}" "${RUNNER_CONFIG_DIR}/${file}" || die "cannot copy ${file} to ${RUNNER_CONFIG_DIR}"
        fi
    done
}

register_with_jitconfig() {
    local secret
    read_secret_file "${RUNNER_JITCONFIG_FILE}" "JIT runner config"
    printf '%s\n' "${secret}" >"${RUNNER_CONFIG_DIR}/${JITCONFIG_NAME}" ||
        die "cannot write the JIT runner config to ${RUNNER_CONFIG_DIR}"
    unset secret
    log "JIT runner config for ${POD_NAME} handed to the runner container"
}

register_phase() {
    if [[ -e "${REGISTERED_FILE}" || -e "${DISK_REGISTERED_FILE}" ]]; then
        log "this pod registered its runner already (its sandbox was made again); nothing to do"
        exit 0
    fi
    umask 077
    if [[ "${RUNNER_REGISTRATION}" == jit ]]; then
        register_with_jitconfig
    else
        register_with_token
    fi
    # The disk copy first: the memory one says the configuration is complete.
    mark work "${DISK_REGISTERED_FILE}"
    : >"${REGISTERED_FILE}" || die "cannot write ${REGISTERED_FILE}"
    exit 0
}

# containerMode dind: the Docker daemon is a native sidecar that the kubelet starts before the
# register init container, so it warms up while the runner registers; but "started" is not
# "answering". No job may land on a runner whose docker cannot reach its daemon yet, so the run
# phase waits before it starts the listener (bounded; a signal stops the wait at once, like any
# child). The wait comes before the run phase marks the pod as started, so a runner container
# that gave up is retried by the pod's restart policy (OnFailure) instead of ending the pod.
await_docker() {
    local wait="${RUNNER_DOCKER_WAIT_SECONDS:-0}"
    [[ "${wait}" =~ ^[0-9]+$ ]] || die "RUNNER_DOCKER_WAIT_SECONDS must be whole seconds, got '${wait}'"
    [[ "${wait}" -gt 0 ]] || return 0
    command -v docker >/dev/null || die "RUNNER_DOCKER_WAIT_SECONDS is set but the image has no docker CLI"
    log "waiting for the Docker daemon at ${DOCKER_HOST:-its default socket} (at most ${wait}s)"
    local started="${SECONDS}"
    phase=docker
    run_child timeout "${wait}" bash -c 'until docker version >/dev/null 2>&1; do sleep 1; done'
    [[ "${terminating}" -eq 0 ]] || { log "stopped while waiting for the Docker daemon"; exit 0; }
    [[ "${child_status}" -eq 0 ]] || die "the Docker daemon at ${DOCKER_HOST:-its default socket} did not answer within ${wait}s (see the log of the pod's dind container)"
    log "the Docker daemon answers (after $((SECONDS - started))s)"
}

# --- run: the runner container -------------------------------------------------------------

run_phase() {
    if [[ -e "${RUNNER_STATE_FILE}" || -e "${DISK_STARTED_FILE}" ]]; then
        log "this pod already started a runner once; exiting so the operator replaces it"
        # The runner's last words stay the container's, whichever of its runs is looked at.
        last_words "this pod already started a runner once; exiting so the operator replaces it"
        exit 0
    fi
    if [[ ! -e "${REGISTERED_FILE}" && -e "${DISK_REGISTERED_FILE}" ]]; then
        log "this pod's runner configuration was lost with its memory (a node reboot); exiting so the operator replaces it"
        last_words "this pod's runner configuration was lost with its memory (a node reboot); exiting so the operator replaces it"
        exit 0
    fi
    [[ -e "${REGISTERED_FILE}" ]] ||
        die "no runner configuration in ${RUNNER_CONFIG_DIR} (the register init container did not finish)"
    await_docker
    mark work "${DISK_STARTED_FILE}"
    mark runner-config "${RUNNER_STATE_FILE}"
    local -a run_args=()
    local jit="${RUNNER_CONFIG_DIR}/${JITCONFIG_NAME}" file
    if [[ -e "${jit}" ]]; then
        local jitconfig
        jitconfig="$(tr -d '[:space:]' <"${jit}")" || die "cannot read ${jit}"
        rm -f "${jit}" || die "cannot delete ${jit}"
        run_args=(--jitconfig "${jitconfig}")
        unset jitconfig
    else
        for file in "${RUNNER_CONFIG_FILES[@]}"; do
            if [[ -e "${RUNNER_CONFIG_DIR}/${file}" ]]; then
                cp -p "${RUNNER_CONFIG_DIR}/${file}" "${file}" || die "cannot restore ${file} from ${RUNNER_CONFIG_DIR}"
            fi
        done
    fi
    if [[ "${terminating}" -eq 1 ]]; then
        log "stopped before the runner started"
        exit 0
    fi
    log "starting the runner listener"
    phase=listener
    run_captured ./run.sh "${run_args[@]}"
    if [[ "${terminating}" -eq 1 ]]; then
        local ended="run.sh exit code ${child_status}"
        # collect_child's lost status (bash answers -1).
        [[ "${child_status}" -ge 0 ]] || ended="run.sh ended as the signal came; its exit code is unknown"
        log "runner stopped (${ended})"
        last_words "runner stopped (${ended})"
        exit 0
    fi
    log "runner exited with code ${child_status}"
    last_words "runner exited with code ${child_status}"
    exit "${child_status}"
}

# RUNNER_CA_FILE (spec.githubServerTLS): the pool's CA bundle, trusted besides the image's public
# CAs. The runner (.NET on OpenSSL), git and curl read SSL_CERT_FILE, which replaces the system
# bundle rather than adding to it, so it names the two joined; Node.js actions read
# NODE_EXTRA_CA_CERTS, which the pod sets.
trust_pool_ca() {
    [[ -n "${RUNNER_CA_FILE:-}" ]] || return 0
    [[ -r "${RUNNER_CA_FILE}" ]] || die "RUNNER_CA_FILE ${RUNNER_CA_FILE} cannot be read"
    local bundle="${TMPDIR:-/tmp}/runnerpool-ca-bundle.crt" system=/etc/ssl/certs/ca-certificates.crt
    { if [[ -r "${system}" ]]; then cat "${system}"; fi; cat "${RUNNER_CA_FILE}"; } >"${bundle}" ||
        die "cannot write ${bundle}"
    export SSL_CERT_FILE="${bundle}"
    log "trusting the pool's CA bundle ${RUNNER_CA_FILE} besides the public CAs"
}

trust_pool_ca
if [[ "${PHASE}" == register ]]; then
    register_phase
else
    run_phase
fi
