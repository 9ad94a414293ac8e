//go:build tools

// Package tools pins etcd's server command (package main at the module root),
// built by scripts/build-control-plane, so that `go mod tidy` keeps it.
package tools

import _ "go.etcd.io/etcd/server/v3"
