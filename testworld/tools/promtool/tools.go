//go:build tools

// Package tools names the command this module exists to build, so that
// `go mod tidy` keeps its dependencies in go.sum.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
