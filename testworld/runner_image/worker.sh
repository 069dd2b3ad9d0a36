#!/usr/bin/env bash
# Stand-in for the runner's Runner.Worker when container hooks are set
# (ACTIONS_RUNNER_CONTAINER_HOOKS): run.sh starts it, named Runner.Worker, for each job, and it
# runs the job the way the real worker does with hooks, invoking the hook file with one JSON
# object on stdin ({"command", "responseFile", "args", "state"}) and reading the response file:
#
#   prepare_job (the job container: the workflow's `container:`), then the job's step, then
#   cleanup_job, with the state prepare_job answered.
#
# The job's container image stands in for the workflow's `jobs.<id>.container`: it is
# STANDIN_JOB_CONTAINER. None, with ACTIONS_RUNNER_REQUIRE_JOB_CONTAINER=true, fails the
# job, as the real runner does. The step is a container step (run_container_step) in that
# image: `bash -c` checks that the environment the runner gave it arrived (STANDIN_JOB, the job's
# id) and sleeps through the job's duration. (A `run:` step would be run_script_step, an exec
# into the job pod, which the stand-in hook cannot do with curl.)
#
# worker.sh JOB_ID DURATION; exits with the step's exit code. SIGTERM (run.sh cancels the job)
# stops the hook that runs and cleans up before exiting.

STANDIN_NAME=worker.sh
# shellcheck source=testworld/runner_image/standin-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/standin-lib.sh"

job_id="$1" duration="$2"
hooks="${ACTIONS_RUNNER_CONTAINER_HOOKS}"
image="${STANDIN_JOB_CONTAINER:-}"
responses="${RUNNER_WORKDIR:-/runner/_work}/_temp/_runner_hook_responses"
state='{}'

if [[ -z "${image}" ]]; then
    if [[ "${ACTIONS_RUNNER_REQUIRE_JOB_CONTAINER:-}" == true ]]; then
        log "error: Jobs without a job container are forbidden on this runner, please add a 'container:' to your job or contact your self-hosted runner administrator."
        exit 1
    fi
    exec sleep "${duration}"
fi
mkdir -p "${responses}"

# hook COMMAND ARGS: invoke the hooks; sets `answer` to the response file's contents.
hook() {
    local response="${responses}/${job_id}-$1.json"
    rm -f "${response}"
    printf '{"command":"%s","responseFile":"%s","args":%s,"state":%s}' "$1" "${response}" "$2" "${state}" |
        "${hooks}" &
    child=$!
    interruptible=1
    wait_child
    interruptible=0
    answer="$(cat "${response}" 2>/dev/null)"
    return "${child_status}"
}

cleanup() {
    hook cleanup_job '{}' || log "cleanup_job failed"
}

trap on_signal TERM INT

container="$(printf '{"image":"%s","workingDirectory":"/__w","environmentVariables":{},"userMountVolumes":[],"systemMountVolumes":[]}' "${image}")"
if ! hook prepare_job "{\"container\":${container},\"services\":[]}"; then
    log "error: prepare_job failed"
    cleanup
    exit 1
fi
pattern='"state":(\{[^{}]*\})'
[[ "${answer}" =~ ${pattern} ]] && state="${BASH_REMATCH[1]}"
log "job ${job_id}: job container ready (state ${state})"

script="test \\\"\$STANDIN_JOB\\\" = ${job_id} && echo step of job ${job_id} ran in its container && sleep ${duration}"
step="$(printf '{"image":"%s","entryPoint":"bash","entryPointArgs":["-c","%s"],"environmentVariables":{"STANDIN_JOB":"%s"},"workingDirectory":"/__w","systemMountVolumes":[]}' \
    "${image}" "${script}" "${job_id}")"
[[ "${stopping}" -eq 1 ]] || hook run_container_step "${step}"
code=$?
[[ "${stopping}" -eq 0 ]] || code=143
cleanup
log "job ${job_id}: step exited ${code}"
exit "${code}"
