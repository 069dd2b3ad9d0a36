#!/usr/bin/env bash
# A job still running when its pod is deleted (tests/node/test_dind.py, containerMode dind):
# its last step needs the pod's Docker daemon after the runner got SIGTERM, which the native
# sidecar still serves until the runner container has ended.
#
#   docker-after-sigterm.sh ARCHIVE IMAGE

set -euo pipefail

archive="${1:?usage: docker-after-sigterm.sh ARCHIVE IMAGE}"
image="${2:?usage: docker-after-sigterm.sh ARCHIVE IMAGE}"
workspace="${RUNNER_WORKDIR:?}/docker-after-sigterm"
mkdir -p "${workspace}"
cd "${workspace}"

docker load -i "${archive}"
echo "first step done"
sleep 6
docker run --rm --network none "${image}" echo "last step ran"
