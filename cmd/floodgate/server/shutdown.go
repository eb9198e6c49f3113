package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
)

// ErrUncleanShutdown is wrapped by the error Serve returns when shutdown
// cut off requests still running at the shutdown timeout, or could not
// push unsynced counts to the shared store. floodgate serve then exits with
// a non-zero status.
var ErrUncleanShutdown = errors.New("shutdown was not clean")

// inflight counts HTTP requests and unary gRPC calls being served, so that
// shutdown can say how many it cut off.
type inflight struct {
	http atomic.Int64
	grpc atomic.Int64
}

// wrap counts h's requests while they run.
func (f *inflight) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.http.Add(1)
		defer f.http.Add(-1)
		h.ServeHTTP(w, r)
	})
}

// unary is a gRPC interceptor that counts calls while they run.
func (f *inflight) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	f.grpc.Add(1)
	defer f.grpc.Add(-1)
	return h(ctx, req)
}

// shutdownReport logs what the shutdown timeout cut off and returns an
// error wrapping ErrUncleanShutdown if anything was.
func (s *Server) shutdownReport(timeout time.Duration, httpCut, grpcCut int64) error {
	if httpCut == 0 && grpcCut == 0 {
		return nil
	}
	s.log.Warn("requests still running at the shutdown timeout were cut off without an answer",
		"http_requests_cut", httpCut, "grpc_calls_cut", grpcCut, "shutdown_timeout", timeout)
	return fmt.Errorf("%w: %d HTTP requests and %d gRPC calls still running at shutdown_timeout %v were cut off",
		ErrUncleanShutdown, httpCut, grpcCut, timeout)
}
