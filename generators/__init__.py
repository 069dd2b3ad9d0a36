"""Generators of the files the project ships and commits: the CRD and the Grafana dashboard.

Neither the operator nor the test world: they run from the checkout (``make crds``, ``python -m
generators.dashboard``), are not installed with the operator, and the tests run their
``--check`` so a committed file never goes stale.
"""
