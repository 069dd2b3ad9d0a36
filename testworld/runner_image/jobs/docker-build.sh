#!/usr/bin/env bash
# What a user's job does with Docker (tests/node/test_dind.py, containerMode dind): reports the
# daemon's storage driver, loads an image from an archive (the sealed node has no registry),
# runs a container that reads and writes the workspace, and builds an image from it.
#
#   docker-build.sh ARCHIVE IMAGE
#
# The workspace is under $RUNNER_WORKDIR, the work volume that the daemon mounts at the same
# path: a bind mount (-v "$PWD:...") names a directory the daemon sees. The daemon has no
# network, so every container runs with --network none.

set -euo pipefail

archive="${1:?usage: docker-build.sh ARCHIVE IMAGE}"
image="${2:?usage: docker-build.sh ARCHIVE IMAGE}"
workspace="${RUNNER_WORKDIR:?}/docker-build"
mkdir -p "${workspace}"
cd "${workspace}"

docker info --format 'storage driver: {{.Driver}}'
docker load -i "${archive}"
echo "written by the runner" >from-runner.txt
docker run --rm --network none -v "${PWD}:/workspace" "${image}" \
    sh -c 'cat /workspace/from-runner.txt && echo "written in a container" > /workspace/from-container.txt'
cat from-container.txt
printf 'FROM %s\nCOPY from-runner.txt /baked.txt\nRUN echo "made by RUN" > /run.txt\n' "${image}" >Dockerfile
DOCKER_BUILDKIT=0 docker build --network none -t testworld/built:1 .
docker run --rm --network none testworld/built:1 cat /baked.txt /run.txt
