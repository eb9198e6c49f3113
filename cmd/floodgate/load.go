package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"strings"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/loadgen"
)

// loadOutput is how load reports: as JSON, and where to write its own CPU
// profile.
type loadOutput struct {
	asJSON     bool
	cpuProfile string
}

// parseLoadArgs reads load's flags into the generator's configuration.
func parseLoadArgs(args []string, stderr io.Writer) (loadgen.Config, loadOutput, error) {
	var out loadOutput
	fs := flag.NewFlagSet("floodgate load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg loadgen.Config
	fs.StringVar(&cfg.Target, "target", "grpc://127.0.0.1:8081", "front end to load: grpc://HOST:PORT (Envoy RLS), gubernator://HOST:PORT (gubernator's V1/GetRateLimits) or http://HOST:PORT (JSON API /v1/check)")
	fs.IntVar(&cfg.Concurrency, "concurrency", loadgen.DefaultConcurrency, "clients (closed loop) or largest number of calls in flight (open loop)")
	fs.Float64Var(&cfg.Rate, "rate", 0, "open loop: calls per second, latency measured from each call's scheduled time (0: closed loop)")
	fs.DurationVar(&cfg.Duration, "duration", loadgen.DefaultDuration, "how long to send calls")
	fs.IntVar(&cfg.Keys, "keys", loadgen.DefaultKeys, "number of distinct key values, chosen uniformly at random per call")
	fs.StringVar(&cfg.Domain, "domain", loadgen.DefaultDomain, "rate-limit domain")
	fs.Func("descriptor", "a descriptor as key=value[,key=value...]; repeat for several descriptors per call (default client=client-). Each call's key number replaces \"{}\" in values, or else is appended to the first descriptor's \"key\" entry or first entry", func(s string) error {
		d, err := loadgen.ParseDescriptor(s)
		if err != nil {
			return err
		}
		cfg.Descriptors = append(cfg.Descriptors, d)
		return nil
	})
	hits := fs.Uint("hits", 0, "hits per call (0 means 1)")
	fs.DurationVar(&cfg.Timeout, "timeout", loadgen.DefaultTimeout, "deadline of each call")
	fs.IntVar(&cfg.Conns, "conns", 2, "gRPC connections shared by the clients")
	fs.StringVar(&cfg.KeyHeader, "key-header", "", "plain HTTP load (e.g. through the gateway): GET the target URL with this header set to key-N")
	fs.BoolVar(&out.asJSON, "json", false, "print the summary as JSON")
	quiet := fs.Bool("quiet", false, "no progress line on stderr")
	fs.StringVar(&out.cpuProfile, "cpuprofile", "", "write the load generator's own CPU profile to this file")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: floodgate load [--target grpc://HOST:PORT | gubernator://HOST:PORT | http://HOST:PORT] [--duration D] [--concurrency N]\n"+
			"                     [--rate R] [--keys N] [--domain D] [--descriptor k=v,...]... [--json]\n\n"+
			"Sends rate-limit checks to a running server's Envoy RLS (gRPC) or JSON API (HTTP) and prints\n"+
			"throughput, latency and outcomes: allowed, over the limit, errors, and the share of calls no\n"+
			"rule applied to (unmatched: allowed without being limited).\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, out, err
	}
	if fs.NArg() > 0 {
		return cfg, out, fmt.Errorf("load: unexpected argument %q (flags only; see floodgate load -h)", fs.Arg(0))
	}
	// Zero means "default" to the library; on the command line it is a
	// mistake.
	if cfg.Keys < 1 || cfg.Concurrency < 1 || cfg.Duration <= 0 || cfg.Conns < 1 {
		return cfg, out, fmt.Errorf("load: --keys, --concurrency, --conns and --duration must be positive; got %d, %d, %d, %v", cfg.Keys, cfg.Concurrency, cfg.Conns, cfg.Duration)
	}
	if *hits > 1<<32-1 {
		return cfg, out, fmt.Errorf("load: -hits %d is too large", *hits)
	}
	cfg.Hits = uint32(*hits)
	if !*quiet {
		cfg.Progress = stderr
		cfg.ProgressCR = isTerminal(stderr)
	}
	return cfg, out, nil
}

// runLoad is "floodgate load": it drives the gRPC RLS or HTTP JSON front end
// of a running server and prints throughput, latency and outcomes.
func runLoad(args []string, stdout, stderr io.Writer) error {
	cfg, out, err := parseLoadArgs(args, stderr)
	if err != nil {
		return err
	}
	// The generator's heap is small and short-lived (a few MB of encoded
	// requests and histograms), so collecting it less often costs little
	// memory and leaves more CPU to the server it shares a machine with.
	// GOGC in the environment still decides when set.
	if os.Getenv("GOGC") == "" {
		defer debug.SetGCPercent(debug.SetGCPercent(400))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if out.cpuProfile != "" {
		f, err := os.Create(out.cpuProfile)
		if err != nil {
			return fmt.Errorf("load: --cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("load: cpu profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	s, err := loadgen.Run(ctx, cfg)
	if err != nil {
		if strings.HasPrefix(err.Error(), "target ") {
			return fmt.Errorf("load: --target: %w", err)
		}
		return fmt.Errorf("load: %w", err)
	}
	if out.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	s.WriteText(stdout)
	if s.Calls > 0 && s.Errors == s.Calls {
		return fmt.Errorf("load: every call failed")
	}
	return nil
}

// isTerminal reports whether w is a character device, so a progress line can
// be rewritten in place.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
