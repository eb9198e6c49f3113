package rlsclient_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/floodgate-dev/floodgate/internal/server"
	"github.com/floodgate-dev/floodgate/rlsclient"
)

// startServer runs `floodgate serve` in this process with rules, on a
// loopback port, and returns its gRPC address and a function to stop it.
func startServer(rules string) (string, func()) {
	dir, _ := os.MkdirTemp("", "rlsclient")
	path := filepath.Join(dir, "rules.yaml")
	os.WriteFile(path, []byte(rules), 0o644)
	cfg := server.DefaultConfig()
	cfg.HTTP.Addr, cfg.GRPC.Addr, cfg.Rules = "127.0.0.1:0", "127.0.0.1:0", path
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := server.New(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		panic(err)
	}
	if err := srv.Listen(); err != nil {
		panic(err)
	}
	done := make(chan struct{})
	go func() { srv.Serve(ctx); close(done) }()
	return srv.Addr(server.ListenerGRPC), func() { cancel(); <-done; os.RemoveAll(dir) }
}

// A Go program asks a central Floodgate server, as it would ask a Limiter.
func Example() {
	addr, stop := startServer(`
domain: api
rules:
  - name: per-client
    match: {key: "*"}
    count_by: [key]
    limit: 2
    window: 1m
`)
	defer stop()

	c, err := rlsclient.New(addr, rlsclient.Options{Domain: "api", Timeout: time.Second})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	for range 3 {
		d, err := c.Allow(context.Background(), "acme")
		if err != nil {
			panic(err)
		}
		fmt.Printf("allowed %v, %d of %d remaining\n", d.Allowed, d.Remaining, d.Limit)
	}
	// Output:
	// allowed true, 1 of 2 remaining
	// allowed true, 0 of 2 remaining
	// allowed false, 0 of 2 remaining
}
