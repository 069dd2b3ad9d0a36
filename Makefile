# The two commands a newcomer needs are `make demo` and `make test`; the rest are steps of those.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv envtest node-packages node lint test demo crds

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

# Builds (once, cached outside the repo) or locates etcd/kube-apiserver/kube-controller-manager.
envtest: $(STAMP)
	$(BIN)/python -m testworld.envtest.assets

# Debian packages the test node needs (CI starts from a fresh machine); installed only if missing.
NODE_DEBS := runc iproute2 util-linux mount gcc libc6-dev curl
node-packages:
	@missing=$$(for p in $(NODE_DEBS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages for the test node:" $$missing; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

# Builds (once, cached beside the control plane) kubelet, kube-scheduler, containerd, the runc shim, CNI plugins.
node: envtest node-packages
	$(BIN)/python -m testworld.node.assets

crds: $(STAMP)
	$(BIN)/python -m generators.crd
	$(BIN)/python -m generators.receiver_policy

# The Python checks, then actionlint on .github/workflows, helm lint on the chart and promtool
# check rules on deploy/monitoring (all pinned, built once from the Go module proxy into the test
# binaries' cache: testworld/tools); `make test` runs it first, so the tests find them built.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m testworld.tools.lint

# The whole session runs in namespaces of its own (testworld/node/seal.py): no packet leaves.
test: node lint
	$(BIN)/python -m testworld.node.seal -- $(BIN)/pytest

# Runs on the node when it can start; otherwise says why and plays the pods with the stand-in.
demo: envtest
	-@$(MAKE) --no-print-directory node-packages
	$(BIN)/python -m testworld.demo
