// Package modproxy asks the Go module proxy, through the go command, which
// versions of a module exist: the interop tests use it to fail when the
// system they stand in for has a release newer than the one they pin.
package modproxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Module is what `go list -m -json` says of a module.
type Module struct {
	Path, Version, Time, GoVersion string
	Dir                            string
	Replace                        *Module
	Error                          *struct{ Err string }
}

// List runs `go list -m -json args...` in dir with env added.
func List(ctx context.Context, dir string, env []string, args ...string) (Module, error) {
	cmd := exec.CommandContext(ctx, "go", append([]string{"list", "-m", "-json"}, args...)...)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var m Module
	if err != nil {
		return m, fmt.Errorf("%v: %s", err, strings.TrimSpace(stderr.String()))
	}
	if err := json.Unmarshal(out, &m); err != nil {
		return m, err
	}
	if m.Error != nil {
		return m, errors.New(m.Error.Err)
	}
	return m, nil
}

// Newest names the newest version of the module path that the proxy in
// GOPROXY serves, asked from an empty module in scratch (a directory the
// caller owns) so that no requirement answers instead of the proxy. When
// the proxy cannot be reached, the module cache answers (as a file://
// proxy: the newest version downloaded). source says which one answered.
func Newest(ctx context.Context, scratch, path string) (m Module, source string, err error) {
	if err := os.WriteFile(filepath.Join(scratch, "go.mod"), []byte("module probe\n\ngo 1.26\n"), 0o644); err != nil {
		return m, "", err
	}
	env := []string{"GOFLAGS=-mod=mod", "GOWORK=off"}
	m, err = List(ctx, scratch, env, path+"@latest")
	if err == nil {
		return m, "the module proxy (" + goEnv("GOPROXY") + ")", nil
	}
	proxyErr := err
	cache := filepath.Join(goEnv("GOMODCACHE"), "cache", "download")
	m, err = List(ctx, scratch, append(env, "GOPROXY=file://"+cache, "GONOSUMDB="+path, "GOSUMDB=off"), path+"@latest")
	if err != nil {
		return m, "", fmt.Errorf("neither the module proxy (%v) nor the module cache (%v) names a version of %s", proxyErr, err, path)
	}
	return m, fmt.Sprintf("the module cache %s (the proxy is unreachable: %v)", cache, proxyErr), nil
}

// goEnv is `go env name`.
func goEnv(name string) string {
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
