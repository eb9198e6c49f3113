// Command gubernator-reference runs gubernator's daemon (the version of the
// module it is built with: scripts/compare-gubernator-current builds it in a
// throwaway module outside the tree) in this process on a frozen clock, so
// that interop/gubernator's tests, in another process, can hold it beside
// Floodgate in lockstep: it cannot be linked into one test binary with
// Floodgate when their OpenTelemetry requirements conflict.
//
//	gubernator-reference -grpc 127.0.0.1:0 -http 127.0.0.1:0 -control 127.0.0.1:0 -start 2026-03-31T23:59:50Z
//
// It prints one line, "ready grpc=ADDR http=ADDR control=ADDR", once it
// answers. The control listener moves the clock: POST /advance?d=DURATION
// (a Go duration) advances it, GET /now answers the frozen time in Unix
// nanoseconds. It stops on SIGINT or SIGTERM, or when its standard input
// closes (the test that started it ended).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	guber "github.com/gubernator-io/gubernator/v2"
	"github.com/mailgun/holster/v4/clock"
	"github.com/sirupsen/logrus"
)

func main() {
	grpcAddr := flag.String("grpc", "127.0.0.1:0", "gRPC listen address")
	httpAddr := flag.String("http", "127.0.0.1:0", "HTTP listen address")
	controlAddr := flag.String("control", "127.0.0.1:0", "clock control listen address")
	startAt := flag.String("start", "2026-03-31T23:59:50Z", "the frozen clock's start (RFC 3339)")
	flag.Parse()
	start, err := time.Parse(time.RFC3339Nano, *startAt)
	if err != nil {
		log.Fatal(err)
	}
	logrus.SetLevel(logrus.ErrorLevel)
	clock.Freeze(start)

	// gubernator advertises and dials its own gRPC address: take a real
	// port first.
	if ln, err := net.Listen("tcp", *grpcAddr); err != nil {
		log.Fatal(err)
	} else {
		*grpcAddr = ln.Addr().String()
		ln.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	d, err := guber.SpawnDaemon(ctx, guber.DaemonConfig{
		GRPCListenAddress: *grpcAddr, HTTPListenAddress: *httpAddr, AdvertiseAddress: *grpcAddr,
		InstanceID: "reference", Logger: logrus.WithField("instance", "reference"),
	})
	cancel()
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	d.SetPeers([]guber.PeerInfo{{GRPCAddress: *grpcAddr, HTTPAddress: d.HTTPListener.Addr().String()}})

	ctl, err := net.Listen("tcp", *controlAddr)
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /advance", func(w http.ResponseWriter, r *http.Request) {
		by, err := time.ParseDuration(r.URL.Query().Get("d"))
		if err != nil || by < 0 {
			http.Error(w, "d: a non-negative Go duration", http.StatusBadRequest)
			return
		}
		clock.Advance(by)
		fmt.Fprintln(w, clock.Now().UnixNano())
	})
	mux.HandleFunc("GET /now", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, clock.Now().UnixNano())
	})
	go http.Serve(ctl, mux)
	fmt.Printf("ready grpc=%s http=%s control=%s\n", *grpcAddr, d.HTTPListener.Addr(), ctl.Addr())

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	eof := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(eof) }()
	select {
	case <-stop:
	case <-eof:
	}
}
