//go:build tools

// Pins the controllers' main packages so that `go mod tidy` keeps what they import.
package tools

import (
	_ "github.com/fluxcd/kustomize-controller"
	_ "github.com/fluxcd/source-controller"
)
