# The two commands a newcomer needs are `make demo` and `make test`; the rest are steps of those.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv envtest lint test demo crds

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

# Builds (once, cached outside the repo) or locates etcd/kube-apiserver/kube-controller-manager.
envtest: $(STAMP)
	$(BIN)/python -m testworld.envtest.assets

crds: $(STAMP)
	$(BIN)/python -m testworld.crdgen

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

test: envtest lint
	$(BIN)/pytest

demo: envtest
	$(BIN)/python -m testworld.demo
