#!/usr/bin/env bash
# Stand-in for the actions runner's run.sh, against the fake GitHub (testworld.fakegithub).
#
# Runs the runner config.sh configured: opens a listener session (the runner goes online),
# long-polls for a job assigned to it, marks it started (in_progress, runner busy), "runs"
# it by sleeping for the job's duration in a process called Runner.Worker (the real listener
# starts bin/Runner.Worker for each job; entrypoint.sh looks for it to tell a busy runner from
# an idle one), reports it completed (success) and, as an
# ephemeral runner does, exits 0; GitHub then removes the runner. A runner configured
# without --ephemeral keeps listening.
#
# Signals (entrypoint.sh forwards SIGTERM at once to an idle runner, to a busy one only when
# its busy grace runs out; RUNNER_MANUALLY_TRAP_SIG is irrelevant here):
# - while idle: the session is closed, so the runner is offline but still registered, as
#   the real runner leaves it (deleting it is the operator's job), and exit 0;
# - while running a job: the real listener cancels its job on shutdown, and so does this
#   one: the job completes as "cancelled", the runner goes offline, exit 0. So does a signal
#   while the job is being started (the real listener completes it as cancelled then too).
#   A test sees a cancelled job when a busy runner is signalled.
# A runner older than GitHub accepts is refused its session: it exits as the real one does
# (see deprecated below). If GitHub revokes the runner's credential (the runner was deleted), it exits 0 like the
# real one ("Runner OAuth token has been revoked. Shutting down.").
#
# While a job runs, a background loop renews its lock (POST renewjob), as the real runner's
# listener does every 60 s; GitHub fails a job whose lock runs out ("lost communication with
# the server"), so a killed run.sh is seen as the real runner's death would be. The loop
# renews at the interval the fake answers (renew_s) and ends with the job, on a 404 (the job
# is no longer ours), or when run.sh itself is gone.
#
# With ACTIONS_RUNNER_CONTAINER_HOOKS set, a job runs through the container hooks instead
# (worker.sh, still called Runner.Worker), and a step that fails makes the job's conclusion
# "failure" (a job's script is then not run: the hooks' step stands in for it).
#
# RUNNER_POLL_SECONDS (default 20) bounds each long poll. `run.sh --jitconfig CONFIG` runs a
# just-in-time runner without config.sh (see below); a config already used is refused.

STANDIN_NAME=run.sh
# shellcheck source=testworld/runner_image/standin-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/standin-lib.sh"

POLL_SECONDS="${RUNNER_POLL_SECONDS:-20}"
[[ "${POLL_SECONDS}" =~ ^[0-9]+$ ]] || { log "error: RUNNER_POLL_SECONDS must be whole seconds"; exit 1; }

# --jitconfig CONFIG: a just-in-time runner (GitHub's generate-jitconfig), configured by the
# config itself instead of config.sh: base64 of JSON whose .runner and .credentials are base64
# of the files config.sh would write. GitHub accepts a config once.
if [[ "${1:-}" == --jitconfig ]]; then
    [[ -n "${2:-}" ]] || { log "error: --jitconfig needs a value"; exit 1; }
    decoded="$(printf '%s' "$2" | base64 -d 2>/dev/null)" || { log "error: the JIT config is not base64"; exit 1; }
    if ! runner_b64="$(json_string .runner "${decoded}")" ||
        ! credentials_b64="$(json_string .credentials "${decoded}")"; then
        log "error: the JIT config has no .runner or .credentials"
        exit 1
    fi
    unset decoded
    printf '%s' "${runner_b64}" | base64 -d >"${RUNNER_FILE}" || { log "error: cannot write ${RUNNER_FILE}"; exit 1; }
    (umask 077 && printf '%s' "${credentials_b64}" | base64 -d >"${CREDENTIALS_FILE}") ||
        { log "error: cannot write ${CREDENTIALS_FILE}"; exit 1; }
    unset runner_b64 credentials_b64
    shift 2
fi
[[ $# -eq 0 ]] || { log "error: unknown option '$1' (this stand-in takes --jitconfig CONFIG or nothing)"; exit 1; }

if [[ ! -r "${RUNNER_FILE}" || ! -r "${CREDENTIALS_FILE}" ]]; then
    log "error: Runner is not configured (run config.sh first)."
    exit 1
fi
settings="$(cat "${RUNNER_FILE}")"
service="$(value_of service "${settings}")"
runner_name="$(value_of runner_name "${settings}")"
ephemeral="$(value_of ephemeral "${settings}")"
credential="$(value_of credential "$(cat "${CREDENTIALS_FILE}")")"
auth="Bearer ${credential}"
session=""

trap on_signal TERM INT

# Leaves the listener session, so GitHub shows the runner offline.
go_offline() {
    interruptible=0
    if [[ -n "${session}" ]]; then
        http DELETE "${service}/sessions/${session}" "${auth}"
        session=""
    fi
}

finish() {
    go_offline
    log "$1"
    exit "${2:-0}"
}

revoked() {
    session=""
    finish "Runner OAuth token has been revoked. Shutting down." 0
}

# GitHub refuses an outdated runner's session (403, "Runner version vX is deprecated and cannot
# receive messages."); the real listener prints "An error occurred: <that>" and its run-helper.sh
# exits 7 when ACTIONS_RUNNER_RETURN_VERSION_DEPRECATED_EXIT_CODE is 1, else 0 ("terminated
# error, stop the service, no retry needed": actions/runner src/Misc/layoutroot/run-helper.sh.template).
deprecated() {
    log "An error occurred: $(error_message)"
    if [[ "${ACTIONS_RUNNER_RETURN_VERSION_DEPRECATED_EXIT_CODE:-}" == 1 ]]; then
        log "Runner listener exit with deprecated version exit code: 7."
        exit 7
    fi
    log "Runner listener exit with terminated error, stop the service, no retry needed."
    exit 0
}

http POST "${service}/sessions" "${auth}" --data-urlencode "version=${RUNNER_VERSION}"
case "${http_status}" in
    201) session="$(value_of session_id "${http_body}")" ;;
    401) revoked ;;
    403) deprecated ;;
    409) finish "error: GitHub refused the runner's session: $(error_message)" 1 ;;
    *) finish "error: cannot open a listener session (HTTP ${http_status}): $(error_message)" 1 ;;
esac
log "connected to GitHub as ${runner_name}; listening for jobs"

# renew_job ID: the renewal loop, in a subshell of its own (its own HTTP scratch file; TERM
# ends it at once). $$ stays run.sh's PID in a subshell: once run.sh is gone, it stops.
renew_job() {
    local job_id="$1" every=1
    HTTP_SCRATCH="${STANDIN_DIR}/.http.renew.${BASHPID}"
    child=0
    # Never "kill 0" (child is 0 between calls): that would signal the whole process group.
    trap '[[ "${child}" -eq 0 ]] || kill -TERM "${child}" 2>/dev/null; rm -f "${HTTP_SCRATCH}"*; exit 0' TERM
    while kill -0 "$$" 2>/dev/null; do
        HTTP_MAX_TIME=10 http POST "${service}/renewjob" "${auth}" --data-urlencode "job_id=${job_id}"
        case "${http_status}" in
            200)
                every="$(value_of renew_s "${http_body}")"
                [[ "${every}" =~ ^[0-9]+([.][0-9]+)?$ ]] || every=1
                ;;
            401 | 404) exit 0 ;;
            *) log "renewing job ${job_id} failed (HTTP ${http_status}); retrying" ;;
        esac
        sleep "${every}" &
        child=$!
        wait "${child}"
        child=0
    done
}

# start_renewing ID / stop_renewing: the renewal loop runs from the job's start to its end.
renewer=0
start_renewing() {
    renew_job "$1" &
    renewer=$!
}
stop_renewing() {
    if [[ "${renewer}" -ne 0 ]]; then
        kill -TERM "${renewer}" 2>/dev/null || true
        wait "${renewer}" 2>/dev/null || true
        renewer=0
    fi
}

# report ID started|completed [curl options...]: tell GitHub. The real runner retries these
# calls (its first job renewal and its job completion); a call lost on the way (no answer, or
# a 5xx) is sent again, so one dropped request cannot leave the job in progress: GitHub took
# a lost "started" (the job is in progress), and a signal then must still end in "cancelled".
report() {
    local job_id="$1" what="$2" attempt
    shift 2
    for attempt in 1 2 3; do
        HTTP_MAX_TIME=10 http POST "${service}/jobs/${job_id}/${what}" "${auth}" "$@"
        [[ "${http_status}" == 000 || "${http_status}" == 5* ]] || return 0
        log "reporting job ${job_id} ${what} got no answer (attempt ${attempt}); trying again"
    done
}

# run_job ID DURATION [SCRIPT]: start it, sleep through it or run its script (signals
# interrupt), report its end: success, or failure when the script failed, with what the script
# wrote to $GITHUB_STEP_SUMMARY, as the real runner uploads a job's summary; sets job_conclusion.
run_job() {
    local job_id="$1" duration="$2" script="${3:-}" conclusion=success
    interruptible=0
    report "${job_id}" started
    case "${http_status}" in
        204) ;;
        401) revoked ;;
        *)
            log "job ${job_id} is no longer ours (HTTP ${http_status}); listening again"
            return 1
            ;;
    esac
    start_renewing "${job_id}"
    interruptible=1
    local summary="${STANDIN_DIR}/.summary.${job_id}" plain_sleep=0
    : >"${summary}"
    if [[ -n "${ACTIONS_RUNNER_CONTAINER_HOOKS:-}" ]]; then
        # The job's containers are the hooks' (worker.sh): its step decides the conclusion.
        log "running job ${job_id} through the container hooks"
        (GITHUB_STEP_SUMMARY="${summary}" exec -a Runner.Worker bash "${STANDIN_DIR}/worker.sh" "${job_id}" "${duration}") &
    elif [[ -n "${script}" ]]; then
        log "running job ${job_id}'s steps"
        # The worker stays itself while its steps run, as the real Runner.Worker does (the
        # entrypoint tells a busy runner by it): bash would exec a one-command script's command
        # in its place (the last command of a -c string), so the string ends with an exit.
        (GITHUB_STEP_SUMMARY="${summary}" exec -a Runner.Worker bash -c "${script}"$'\n''exit $?') &
    else
        plain_sleep=1
        log "running job ${job_id} for ${duration}s"
        (exec -a Runner.Worker sleep "${duration}") &
    fi
    child=$!
    wait_child
    interruptible=0
    stop_renewing
    # Cancelled only if the signal cut the job short: a job that ran to its end before the
    # signal came is a success (the real runner's worker reports its own result when it ends;
    # a listener told to stop afterwards changes nothing). A plain sleep ends early only by a
    # signal; a script or a hooks step that failed by itself fails.
    if [[ "${child_status}" -ne 0 ]]; then
        if [[ "${stopping}" -eq 1 || "${plain_sleep}" -eq 1 ]]; then
            conclusion=cancelled
        else
            conclusion=failure
        fi
    fi
    report "${job_id}" completed --data-urlencode "conclusion=${conclusion}" --data-urlencode "summary@${summary}"
    rm -f "${summary}"
    if [[ "${http_status}" != 204 ]]; then
        log "reporting job ${job_id} failed (HTTP ${http_status}): $(error_message)"
    fi
    log "job ${job_id} completed with result: ${conclusion}"
    job_conclusion="${conclusion}"
}

while [[ "${stopping}" -eq 0 ]]; do
    interruptible=1
    HTTP_MAX_TIME=$((POLL_SECONDS + 15)) http GET "${service}/sessions/${session}/job?wait=${POLL_SECONDS}" "${auth}"
    interruptible=0
    [[ "${stopping}" -eq 0 ]] || break
    case "${http_status}" in
        200)
            job_id="$(value_of job_id "${http_body}")"
            duration="$(value_of duration_s "${http_body}")"
            script="$(value_of script "${http_body}")" || script=""
            run_job "${job_id}" "${duration}" "${script}" || continue
            if [[ "${stopping}" -eq 1 ]]; then
                # An ephemeral runner was removed with its job; a closed session is harmless.
                finish "stopped while running job ${job_id}; it ended ${job_conclusion}" 0
            fi
            if [[ "${ephemeral}" == 1 ]]; then
                # GitHub removed the runner with its job: there is no session left to close.
                session=""
                finish "ephemeral runner done after one job" 0
            fi
            ;;
        204) ;;
        401) revoked ;;
        000)
            log "cannot reach ${service}; retrying"
            interruptible=1
            sleep 1 &
            child=$!
            wait_child
            ;;
        *) finish "error: the listener session ended (HTTP ${http_status}): $(error_message)" 1 ;;
    esac
done
finish "stopped while idle; runner offline" 0
