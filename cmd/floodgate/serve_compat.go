package main

import (
	"context"
	"fmt"
	"io"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/envoycompat"
)

// compatEnvoy is the --compat value that runs envoyproxy/ratelimit's mode.
const compatEnvoy = "envoy-ratelimit"

// referenceName is the name envoyproxy/ratelimit's image runs its binary
// under (/bin/ratelimit); started under it, floodgate runs in that mode.
const referenceName = "ratelimit"

// runCompat serves as a drop-in for envoyproxy/ratelimit, configured by its
// environment variables, until SIGINT or SIGTERM.
func runCompat(lookup func(string) (string, bool), stderr io.Writer) error {
	set, err := envoycompat.ParseSettings(lookup)
	if err != nil {
		return fmt.Errorf("--compat %s: %v", compatEnvoy, err)
	}
	log := set.Logger(stderr)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	srv, err := envoycompat.New(ctx, set, log)
	if err != nil {
		return fmt.Errorf("--compat %s: %v", compatEnvoy, err)
	}
	log.Warn("serving as envoyproxy/ratelimit", "grpc", srv.Addr(envoycompat.ListenerGRPC),
		"http", srv.Addr(envoycompat.ListenerHTTP), "debug", srv.Addr(envoycompat.ListenerDebug))
	return srv.Run(ctx)
}

// runReference is the program started as envoyproxy/ratelimit's binary,
// which takes no arguments.
func runReference(args []string, lookup func(string) (string, bool), stderr io.Writer) error {
	if len(args) > 0 {
		return fmt.Errorf("started as %s (envoyproxy/ratelimit's binary), floodgate takes no arguments; got %q: run it as floodgate for its commands", referenceName, args)
	}
	return runCompat(lookup, stderr)
}

// referenceEnvironment reports whether serve was given envoyproxy/ratelimit's
// environment instead of a configuration of its own: RUNTIME_ROOT (where
// that service's rule files are; Floodgate's own mode never reads it) is
// set and neither --config, --rules, --store nor --print-config is given.
// Then the image's default command (serve with its listener flags) serves
// as that service, so a deployment made for its image that relies on the
// image's entry point needs only the image changed.
func (f serveFlags) referenceEnvironment(lookup func(string) (string, bool)) bool {
	if f.configFile != "" || f.rulesFile != "" || f.storeURL != "" || f.printConfig {
		return false
	}
	_, ok := lookup("RUNTIME_ROOT")
	return ok
}

// invokedAsReference reports whether the program was started as
// envoyproxy/ratelimit's binary.
func invokedAsReference(argv0 string) bool {
	return filepath.Base(argv0) == referenceName
}
