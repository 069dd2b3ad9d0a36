"""Pinned developer tools (Helm, actionlint, promtool) built from the Go module proxy for lint and tests."""
