package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
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
// environment variables, until SIGINT, SIGTERM or SIGHUP.
func runCompat(lookup func(string) (string, bool), stderr io.Writer) error {
	set, err := envoycompat.ParseSettings(lookup)
	if err != nil {
		return fmt.Errorf("--compat %s: %v", compatEnvoy, err)
	}
	log := set.Logger(stderr)
	// SIGHUP too stops it gracefully, as it stops the reference.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
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

// warnReferenceEnvironment says, in one line, that RUNTIME_ROOT is
// ignored when it is set: own mode never reads envoyproxy/ratelimit's
// environment, and a deployment made for that service's image must ask for
// its mode (--compat envoy-ratelimit, or the binary as /bin/ratelimit).
func warnReferenceEnvironment(log *slog.Logger, lookup func(string) (string, bool)) {
	if v, ok := lookup("RUNTIME_ROOT"); ok {
		log.Warn("RUNTIME_ROOT is set and ignored: floodgate serve runs its own mode; for envoyproxy/ratelimit's, run floodgate serve --compat envoy-ratelimit or /bin/ratelimit", "RUNTIME_ROOT", v)
	}
}

// invokedAsReference reports whether the program was started as
// envoyproxy/ratelimit's binary.
func invokedAsReference(argv0 string) bool {
	return filepath.Base(argv0) == referenceName
}
