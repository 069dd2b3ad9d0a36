#!/usr/bin/env bash
# Stand-in for actions/runner-container-hooks (k8s and k8s-novolume), packed where the runner
# image has them (/home/runner/k8s/index.js, /home/runner/k8s-novolume/index.js): the runner
# stand-in's worker (worker.sh) invokes it as the runner invokes the hooks, and it does what
# they do, through the Kubernetes API, as the runner pod's ServiceAccount:
#
# - input: one JSON object on stdin, {"command", "responseFile", "args", "state"}; commands
#   prepare_job, run_container_step, run_script_step, cleanup_job;
# - before every command: a SelfSubjectAccessReview for each permission the hooks require
#   (pods get/list/create/delete, pods/exec get/create, pods/log get/list/watch, secrets
#   create/delete/get/list); one missing and the command fails, as the hooks do;
# - prepare_job: reads its own pod (ACTIONS_RUNNER_POD_NAME) for its node, creates the job pod
#   "<runner pod>-workflow" (container "job", args.container.image, labelled
#   runner-pod=<runner pod>, on the runner's node), waits until it runs, and writes the
#   response file: {"state": {"jobPod": ...}, "context": {"container": {...}}, "isAlpine": false};
# - run_container_step: the step's environment in a Secret, a step pod from args.image with
#   args.entryPoint/entryPointArgs and the Secret as its env, its log (pods/log) on stdout, exit
#   code the step's;
# - run_script_step: the hooks exec into the job pod, over a streaming protocol (SPDY or
#   WebSocket) that curl does not speak: refused here, and the worker uses container steps;
# - cleanup_job: deletes the pods and Secrets labelled runner-pod=<runner pod>.
#
# In-cluster API access as every client has it: KUBERNETES_SERVICE_HOST/_PORT, the token, CA
# and namespace of /var/run/secrets/kubernetes.io/serviceaccount. Only bash, curl and coreutils;
# JSON is read with bash patterns, which is enough for the flat input worker.sh sends.

STANDIN_NAME=k8s-hook
# shellcheck source=testworld/runner_image/standin-lib.sh
source "${RUNNER_DIR:-/home/runner}/standin-lib.sh"

# Where every pod's in-cluster credentials are (STANDIN_ACCOUNT_DIR: elsewhere, for a test that
# runs the hooks as a local process).
ACCOUNT="${STANDIN_ACCOUNT_DIR:-/var/run/secrets/kubernetes.io/serviceaccount}"
POLL_SECONDS=0.5
WAIT_SECONDS="${ACTIONS_RUNNER_PREPARE_JOB_TIMEOUT_SECONDS:-120}"

die() {
    log "error: $*"
    exit 1
}

[[ -n "${ACTIONS_RUNNER_POD_NAME:-}" ]] ||
    die "'ACTIONS_RUNNER_POD_NAME' env is required, please contact your self hosted runner administrator"
[[ -r "${ACCOUNT}/token" ]] || die "no ServiceAccount token at ${ACCOUNT}: the hooks need the Kubernetes API"
API="https://${KUBERNETES_SERVICE_HOST}:${KUBERNETES_SERVICE_PORT}"
NAMESPACE="$(cat "${ACCOUNT}/namespace")"
RUNNER_POD="${ACTIONS_RUNNER_POD_NAME}"
LABEL="runner-pod=${RUNNER_POD}"

# kube METHOD PATH [curl options...]: one API call as the ServiceAccount (a fresh token read
# each time: the kubelet rotates it). Its own user agent: the API server pretty-prints JSON for
# curl's, and the patterns here read compact JSON.
kube() {
    local method="$1" path="$2"
    shift 2
    http "${method}" "${API}${path}" "Bearer $(cat "${ACCOUNT}/token")" --cacert "${ACCOUNT}/ca.crt" \
        --user-agent runner-container-hooks-standin "$@"
}

# kube_json METHOD PATH BODY: the same with a JSON body.
kube_json() {
    kube "$1" "$2" --header "Content-Type: application/json" --data-binary "$3"
}

# json_raw KEY JSON: the raw value ([...] or {...} without nesting) of the first KEY.
json_raw() {
    local pattern="\"$1\"[[:space:]]*:[[:space:]]*(\\[[^]]*\\]|\\{[^{}]*\\})"
    [[ "$2" =~ ${pattern} ]] || return 1
    printf '%s' "${BASH_REMATCH[1]}"
}

json_number() {
    local pattern="\"$1\"[[:space:]]*:[[:space:]]*([0-9]+)"
    [[ "$2" =~ ${pattern} ]] || return 1
    printf '%s' "${BASH_REMATCH[1]}"
}

REQUIRED="pods::get pods::list pods::create pods::delete pods:exec:get pods:exec:create \
pods:log:get pods:log:list pods:log:watch secrets::create secrets::delete secrets::get secrets::list"

check_permissions() {
    local wanted resource subresource verb
    for wanted in ${REQUIRED}; do
        IFS=: read -r resource subresource verb <<<"${wanted}"
        kube_json POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews "$(printf \
            '{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview","spec":{"resourceAttributes":{"namespace":"%s","group":"","resource":"%s","subresource":"%s","verb":"%s"}}}' \
            "${NAMESPACE}" "${resource}" "${subresource}" "${verb}")"
        [[ "${http_status}" == 201 && "${http_body}" =~ \"allowed\"[[:space:]]*:[[:space:]]*true ]] ||
            die "The Service account needs the following permissions: ${REQUIRED} in the '${NAMESPACE}' namespace (missing: ${wanted}; HTTP ${http_status})"
    done
}

# phase POD: the pod's phase ("" when it cannot be read).
phase() {
    kube GET "/api/v1/namespaces/${NAMESPACE}/pods/$1"
    [[ "${http_status}" == 200 ]] || return 1
    json_string phase "${http_body}"
}

# wait_for_phase POD PHASE... : until the pod is in one of them; fails on any other terminal one.
wait_for_phase() {
    local pod="$1" seen deadline=$((SECONDS + WAIT_SECONDS))
    shift
    while ((SECONDS < deadline)); do
        seen="$(phase "${pod}")" || seen=""
        for wanted in "$@"; do
            [[ "${seen}" == "${wanted}" ]] && return 0
        done
        if [[ "${seen}" == Failed || "${seen}" == Succeeded ]]; then
            die "pod ${pod} is ${seen}"
        fi
        sleep "${POLL_SECONDS}"
    done
    die "pod ${pod} did not reach $* in ${WAIT_SECONDS}s (last seen: ${seen:-unknown})"
}

node_name() {
    kube GET "/api/v1/namespaces/${NAMESPACE}/pods/${RUNNER_POD}"
    [[ "${http_status}" == 200 ]] || die "cannot read the runner pod ${RUNNER_POD} (HTTP ${http_status})"
    json_string nodeName "${http_body}" || die "the runner pod has no node"
}

suffix() {
    tr -dc 'a-z0-9' </dev/urandom | head -c 8
}

create_pod() {
    kube_json POST "/api/v1/namespaces/${NAMESPACE}/pods" "$1"
    [[ "${http_status}" == 201 ]] || die "failed to create pod: HTTP ${http_status}: $(json_string message "${http_body}")"
}

prepare_job() {
    local image node pod="${RUNNER_POD:0:54}-workflow"
    image="$(json_string image "${input}")" || die "Job Container is required."
    node="$(node_name)" || exit 1
    cleanup_job quietly
    create_pod "$(printf \
        '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"%s","labels":{"runner-pod":"%s"}},"spec":{"nodeName":"%s","restartPolicy":"Never","containers":[{"name":"job","image":"%s","command":["tail","-f","/dev/null"]}]}}' \
        "${pod}" "${RUNNER_POD}" "${node}" "${image}")"
    wait_for_phase "${pod}" Running
    log "job pod ${pod} is running on ${node}"
    printf '{"state":{"jobPod":"%s"},"context":{"container":{"image":"%s","ports":{}}},"isAlpine":false}' \
        "${pod}" "${image}" >"${response_file}"
}

run_container_step() {
    local image entry args env node id secret pod code
    image="$(json_string image "${input}")" || die "a container step needs an image"
    entry="$(json_string entryPoint "${input}")" || die "a container step needs an entryPoint"
    args="$(json_raw entryPointArgs "${input}")" || args="[]"
    env="$(json_raw environmentVariables "${input}")" || env="{}"
    node="$(node_name)" || exit 1
    id="$(suffix)"
    secret="${RUNNER_POD:0:47}-secret-${id}"
    pod="${RUNNER_POD:0:49}-step-${id}"
    kube_json POST "/api/v1/namespaces/${NAMESPACE}/secrets" "$(printf \
        '{"apiVersion":"v1","kind":"Secret","metadata":{"name":"%s","labels":{"runner-pod":"%s"}},"immutable":true,"stringData":%s}' \
        "${secret}" "${RUNNER_POD}" "${env}")"
    [[ "${http_status}" == 201 ]] || die "failed to create the step's Secret: HTTP ${http_status}"
    create_pod "$(printf \
        '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"%s","labels":{"runner-pod":"%s"}},"spec":{"nodeName":"%s","restartPolicy":"Never","containers":[{"name":"step","image":"%s","command":["%s"],"args":%s,"envFrom":[{"secretRef":{"name":"%s"}}]}]}}' \
        "${pod}" "${RUNNER_POD}" "${node}" "${image}" "${entry}" "${args}" "${secret}")"
    wait_for_phase "${pod}" Succeeded Failed
    kube GET "/api/v1/namespaces/${NAMESPACE}/pods/${pod}/log?container=step"
    [[ "${http_status}" == 200 ]] && printf '%s\n' "${http_body}"
    kube GET "/api/v1/namespaces/${NAMESPACE}/pods/${pod}"
    code="$(json_number exitCode "${http_body}")" || code=1
    kube DELETE "/api/v1/namespaces/${NAMESPACE}/pods/${pod}?gracePeriodSeconds=0"
    kube DELETE "/api/v1/namespaces/${NAMESPACE}/secrets/${secret}"
    log "step pod ${pod} exited ${code}"
    return "${code}"
}

# cleanup_job [quietly]: every pod and Secret this runner's hooks made.
cleanup_job() {
    local kind name rest pattern='"name":"([^"]*)","namespace"'
    local -a names
    for kind in pods secrets; do
        kube GET "/api/v1/namespaces/${NAMESPACE}/${kind}?labelSelector=${LABEL}"
        [[ "${http_status}" == 200 ]] || die "cannot list ${kind} (HTTP ${http_status})"
        names=()
        rest="${http_body}"
        while [[ "${rest}" =~ ${pattern} ]]; do
            names+=("${BASH_REMATCH[1]}")
            rest="${rest#*"${BASH_REMATCH[0]}"}"
        done
        for name in "${names[@]}"; do
            kube DELETE "/api/v1/namespaces/${NAMESPACE}/${kind}/${name}?gracePeriodSeconds=0"
            [[ "${1:-}" == quietly ]] || log "deleted ${kind%s} ${name}"
        done
    done
}

input="$(cat)"
command="$(json_string command "${input}")" || die "no command in the hook's input"
response_file="$(json_string responseFile "${input}")" || response_file=/dev/null
check_permissions
case "${command}" in
    prepare_job) prepare_job ;;
    run_container_step) run_container_step ;;
    run_script_step) die "run_script_step execs into the job pod, which this stand-in cannot (curl has no exec stream)" ;;
    cleanup_job) cleanup_job ;;
    *) die "unknown command ${command}" ;;
esac
