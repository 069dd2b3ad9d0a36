#!/usr/bin/env bash
# Stand-in for the actions runner's config.sh, against the fake GitHub (testworld.fakegithub).
#
# Takes the options deploy/images/runner/entrypoint.sh passes to the real one:
#   --unattended --ephemeral --replace --name N --labels L --url URL --token T --work DIR
#   [--runnergroup G] --disableupdate
# and registers the runner the way the real one does: POST {api}/actions/runner-registration
# with "Authorization: RemoteAuth <token>", where {api} is https://api.github.com for
# github.com and <scheme>://<host>/api/v3 for any other host (GHES), then registers the
# runner with the service that answered (see testworld/fakegithub/actions.py). GitHub
# refuses an expired token, or one issued for another repository or organization, with 404:
# this script then says so and exits 1, as the real one fails.
#
# It leaves .runner and .credentials (mode 600) beside itself for run.sh, and creates the
# work directory. The token is never printed.

STANDIN_NAME=config.sh
# shellcheck source=testworld/runner_image/standin-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/standin-lib.sh"

die() {
    log "error: $*"
    exit 1
}

name="" labels="" url="" token="" work="_work" ephemeral=0 replace=0 group=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --unattended | --disableupdate) shift ;;
        --ephemeral) ephemeral=1; shift ;;
        --replace) replace=1; shift ;;
        --name | --labels | --url | --token | --work | --runnergroup)
            [[ $# -ge 2 ]] || die "$1 needs a value"
            case "$1" in
                --name) name="$2" ;;
                --labels) labels="$2" ;;
                --url) url="$2" ;;
                --token) token="$2" ;;
                --work) work="$2" ;;
                --runnergroup) group="$2" ;;
            esac
            shift 2
            ;;
        *) die "unknown option '$1' (this stand-in takes what entrypoint.sh passes)" ;;
    esac
done
[[ -n "${url}" ]] || die "--url is required"
[[ -n "${token}" ]] || die "--token is required"
[[ -n "${name}" ]] || die "--name is required"
[[ -e "${RUNNER_FILE}" ]] && die "Cannot configure the runner because it is already configured."

trap on_signal TERM INT

# The web URL's host decides where the API is, as in the real runner.
[[ "${url}" =~ ^(https?)://([^/]+)/[^\"[:space:]]+$ ]] || die "--url must be http(s)://HOST/OWNER[/REPO], got '${url}'"
if [[ "${BASH_REMATCH[2]}" == "github.com" ]]; then
    api="https://api.github.com"
else
    api="${BASH_REMATCH[1]}://${BASH_REMATCH[2]}/api/v3"
fi
registration="${api}/actions/runner-registration"

log "registering runner ${name} for ${url}"
http POST "${registration}" "RemoteAuth ${token}" \
    --header "Content-Type: application/json" \
    --data "{\"url\": \"${url}\", \"runner_event\": \"register\"}"
unset token
[[ "${stopping}" -eq 0 ]] || die "stopped during registration"
case "${http_status}" in
    200) ;;
    000) die "cannot reach ${registration}" ;;
    401 | 403 | 404)
        die "Http response code: ${http_status} from 'POST ${registration}': the registration token was" \
            "refused (expired, or issued for another repository or organization): $(error_message)"
        ;;
    *) die "Http response code: ${http_status} from 'POST ${registration}': $(error_message)" ;;
esac
service="$(json_string url "${http_body}")" || die "no service url in the registration answer"
tenant="$(json_string token "${http_body}")" || die "no credential in the registration answer"

http POST "${service}/runners" "Bearer ${tenant}" \
    --data-urlencode "name=${name}" --data-urlencode "labels=${labels}" \
    --data-urlencode "ephemeral=${ephemeral}" --data-urlencode "replace=${replace}" \
    --data-urlencode "runner_group=${group}" --data-urlencode "version=${RUNNER_VERSION}"
[[ "${stopping}" -eq 0 ]] || die "stopped during registration"
case "${http_status}" in
    201) ;;
    409) die "A runner exists with the same name ${name}: $(error_message)" ;;
    *) die "registering the runner failed with HTTP ${http_status}: $(error_message)" ;;
esac
runner_id="$(value_of runner_id "${http_body}")" || die "no runner id in the answer"
credential="$(value_of credential "${http_body}")" || die "no runner credential in the answer"

mkdir -p "${work}" || die "cannot create the work directory ${work}"
(
    umask 077
    printf 'credential=%s\n' "${credential}" >"${CREDENTIALS_FILE}"
) || die "cannot write ${CREDENTIALS_FILE}"
printf 'service=%s\nrunner_id=%s\nrunner_name=%s\nephemeral=%s\nwork=%s\n' \
    "${service}" "${runner_id}" "${name}" "${ephemeral}" "${work}" >"${RUNNER_FILE}" ||
    die "cannot write ${RUNNER_FILE}"
log "runner ${name} (id ${runner_id}) successfully added; settings saved"
