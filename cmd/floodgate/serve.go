package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"syscall"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/server"
)

// serveFlags are serve's command line.
type serveFlags struct {
	configFile, rulesFile, storeURL, logLevel string
	printConfig                               bool
	compat                                    string
	ov                                        serveOverrides
}

// parseServeArgs reads serve's flags.
func parseServeArgs(args []string, stderr io.Writer) (serveFlags, error) {
	var f serveFlags
	fs := flag.NewFlagSet("floodgate serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.configFile, "config", "", "configuration `file` (YAML); without it, the defaults printed by --print-config")
	fs.StringVar(&f.rulesFile, "rules", "", "rule `file`, overriding the config's rules (watched and hot-reloaded)")
	fs.StringVar(&f.storeURL, "store", "", "counter store `URL`, overriding the config's store: memory, host:port, redis://[user:pass@]host:port[/db], rediss://..., redis-cluster://host:port,... or redis-sentinel://host:port,...?master=NAME (docs/redis.md)")
	fs.StringVar(&f.logLevel, "log-level", "", "log `level`: debug, info, warn or error (overrides the config)")
	fs.StringVar(&f.compat, "compat", "", "`mode`: envoy-ratelimit serves as a drop-in for envoyproxy/ratelimit, configured by its environment variables (RUNTIME_ROOT, REDIS_URL, ...) alone; no other flag is taken. The binary started as ratelimit (/bin/ratelimit in the image) runs the same (docs/migration-envoy-ratelimit.md)")
	fs.BoolVar(&f.printConfig, "print-config", false, "print the documented default configuration and exit")
	fs.StringVar(&f.ov.http, "http", "", "HTTP listener `address` host:port (JSON API, /json, metrics, health, status page), overriding the config; \"off\" disables it")
	fs.StringVar(&f.ov.grpc, "grpc", "", "gRPC listener `address` host:port (Envoy Rate Limit Service), overriding the config; \"off\" disables it")
	fs.StringVar(&f.ov.gateway, "gateway", "", "gateway listener `address` host:port, overriding the config (the gateway runs only with routes in the config)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: floodgate serve [--config FILE] [--rules FILE] [--http ADDR] [--grpc ADDR] [--gateway ADDR]\n"+
			"                      [--store URL] [--log-level LEVEL] [--print-config]\n"+
			"       floodgate serve --compat envoy-ratelimit\n\n"+
			"Serves the Envoy Rate Limit Service (gRPC, default 127.0.0.1:8081), the JSON API, metrics,\n"+
			"health checks and the status page (HTTP, default 127.0.0.1:8080), and the gateway when\n"+
			"routes are configured. Without flags it uses the in-memory store and the built-in rules.\n"+
			"Flags override the configuration file. In a container, listen on every interface:\n"+
			"--http 0.0.0.0:8080 --grpc 0.0.0.0:8081.\n"+
			"Exit status: 0 after a clean shutdown, %d when shutdown cut off requests or could not\n"+
			"push unsynced counts, 2 for other errors.\n\n", exitUncleanShutdown)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return f, fmt.Errorf("serve takes no arguments; got %q", fs.Args())
	}
	if f.compat != "" {
		if f.compat != compatEnvoy {
			return f, fmt.Errorf("--compat %q: the only mode is %s", f.compat, compatEnvoy)
		}
		n := 0
		fs.Visit(func(*flag.Flag) { n++ })
		if n > 1 {
			return f, fmt.Errorf("--compat %s takes no other flag: envoyproxy/ratelimit's environment variables configure it", compatEnvoy)
		}
	}
	return f, nil
}

// config is the server configuration: the file's (or the defaults), with
// the flags' overrides.
func (f serveFlags) config() (server.Config, error) {
	cfg := server.DefaultConfig()
	if f.configFile != "" {
		var err error
		if cfg, err = server.LoadConfig(f.configFile); err != nil {
			return cfg, fmt.Errorf("--config: configuration file: %w", err)
		}
	}
	rulesFrom := "rules: in the configuration"
	if f.rulesFile != "" {
		cfg.Rules, rulesFrom = f.rulesFile, "--rules"
	}
	if f.logLevel != "" {
		cfg.Log.Level = f.logLevel
	}
	if err := f.ov.apply(&cfg); err != nil {
		return cfg, err
	}
	if f.storeURL != "" {
		if err := cfg.Store.SetURL(f.storeURL); err != nil {
			return cfg, fmt.Errorf("--store: %v", err)
		}
	}
	if cfg.Rules != "" {
		if _, err := os.Stat(cfg.Rules); err != nil {
			return cfg, fmt.Errorf("%s: rule file %s: %w", rulesFrom, cfg.Rules, errors.Unwrap(err))
		}
	}
	return cfg, nil
}

// runServe runs the rate-limit server until SIGINT or SIGTERM, then shuts
// it down gracefully.
func runServe(args []string, stdout, stderr io.Writer) error {
	f, err := parseServeArgs(args, stderr)
	if err != nil {
		return err
	}
	// The server's heap is small and short-lived per call, so collecting
	// less often buys throughput for little memory (BENCHMARKS.md, "The
	// server"). GOGC in the environment still decides.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	if f.compat != "" {
		return runCompat(os.LookupEnv, stderr)
	}
	if f.printConfig {
		_, err := stdout.Write(server.DefaultYAML())
		return err
	}
	cfg, err := f.config()
	if err != nil {
		return err
	}
	log, err := server.NewLogger(cfg.Log, stderr)
	if err != nil {
		return fmt.Errorf("--log-level: %v", err)
	}
	// GOGC=400 lets the heap grow to five times what is live; the memory
	// limit, from the store's bound in bytes and the container's limit,
	// makes the collector run sooner when that would pass it
	// (docs/operations.md).
	limit, limitFrom := server.ContainerMemoryLimit()
	plan := cfg.FitMemory(limit)
	goLimit := "none"
	switch {
	case os.Getenv("GOMEMLIMIT") != "":
		goLimit = "GOMEMLIMIT=" + os.Getenv("GOMEMLIMIT")
	case plan.GoLimit > 0:
		debug.SetMemoryLimit(plan.GoLimit)
		goLimit = strconv.FormatInt(plan.GoLimit, 10)
	}
	warnReferenceEnvironment(log, os.LookupEnv)
	log.Info("memory bounds", "container_limit", plan.Container, "container_limit_from", limitFrom, "derived_from_container", plan.Derived, "go_memory_limit", goLimit,
		"store_max_bytes", cfg.Store.MaxBytes, "node_max_bytes", cfg.Arrangement.MaxBytes, "node_max_pending_bytes", cfg.Arrangement.MaxPendingBytes)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	srv, err := server.New(ctx, cfg, log)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if err := srv.Run(ctx); err != nil {
		if errors.Is(err, server.ErrUncleanShutdown) {
			// The log has the details; the status tells orchestrators.
			fmt.Fprintln(stderr, "floodgate serve:", err)
			return exitError{code: exitUncleanShutdown}
		}
		return err
	}
	return nil
}

// exitUncleanShutdown is serve's exit status when shutdown cut off requests
// still running at shutdown_timeout or could not push unsynced counts.
const exitUncleanShutdown = 3
