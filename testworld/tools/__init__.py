"""Pinned developer tools (Helm, actionlint) built from the Go module proxy for lint and tests."""
