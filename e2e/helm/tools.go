//go:build tools

// Package tools pins the helm command that scripts/build-helm builds, so
// that `go mod tidy` keeps its dependencies in go.mod/go.sum.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
