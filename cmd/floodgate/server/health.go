package server

import (
	"context"
	"errors"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/metrics"
	"github.com/floodgate-dev/floodgate/distributed"
)

// Ready reports whether the server can decide with its shared store: true
// for the memory store and the split arrangement; for Redis, the node's
// breaker must be closed and the store must answer a ping. A delayed node
// decides on its local view and only syncs with the store, so a ping that
// merely takes longer than its deadline (a store busy with a flood's
// pushes) does not make it unready: its breaker, which opens when the store
// stops answering syncs altogether, says whether it can decide.
func (s *Server) Ready(ctx context.Context) (bool, string) {
	if s.node == nil || s.cfg.Arrangement.Mode == distributed.Split {
		return true, "ok"
	}
	h := s.node.Health()
	if h.BreakerOpen {
		return false, "shared store unavailable (circuit breaker open): " + h.LastError
	}
	if s.redis != nil {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		if err := s.redis.Ping(pctx); err != nil {
			if slowNotDown(ctx, err, s.cfg.Arrangement.Mode) {
				return true, "ok (shared store slow to answer a ping; the delayed node decides locally)"
			}
			return false, "shared store does not answer: " + err.Error()
		}
	}
	return true, "ok"
}

// slowNotDown reports whether err, a failed readiness ping, only ran out of
// time (not the caller's) on a node of arrangement mode that does not wait
// for the store to decide.
func slowNotDown(ctx context.Context, err error, mode distributed.Arrangement) bool {
	return mode == distributed.Delayed && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded)
}

// reportHealth keeps the gRPC health service in step with readiness.
func (s *Server) reportHealth(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last := healthpb.HealthCheckResponse_UNKNOWN
	for {
		st := healthpb.HealthCheckResponse_SERVING
		if ok, _ := s.Ready(ctx); !ok {
			st = healthpb.HealthCheckResponse_NOT_SERVING
		}
		if st != last && ctx.Err() == nil {
			s.health.SetServingStatus("", st)
			s.health.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, st)
			s.quotaHealth(st)
			if last != healthpb.HealthCheckResponse_UNKNOWN {
				s.log.Warn("readiness changed", "status", st.String())
			}
			last = st
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// storeHealth describes the store for metrics and the status page.
func (s *Server) storeHealth() metrics.StoreHealth {
	if s.node == nil {
		h := metrics.StoreHealth{Type: StoreMemory, Arrangement: "local", Up: true}
		if s.mem != nil {
			h.Keys = int64(s.mem.Len())
		}
		return h
	}
	nh := s.node.Health()
	h := metrics.StoreHealth{
		Type:        s.cfg.Store.Type,
		Arrangement: string(nh.Arrangement),
		Up:          nh.Up,
		Breaker:     metrics.BreakerClosed,
		Errors:      nh.StoreErrors,
		SyncLag:     nh.SyncLag,
		Pending:     nh.PendingEvents,
		Keys:        int64(s.node.LocalKeys()),
		KeysScope:   metrics.KeysLocalView,
		Detail:      currentError(nh, time.Now()),

		SyncResends:         nh.SyncResends,
		SyncLateAnswers:     nh.SyncLateAnswers,
		SyncDeferred:        nh.DeferredEvents,
		SummaryCharged:      nh.EvictedCharged,
		SummaryReads:        nh.ChargeReads,
		SummarySettled:      nh.ChargesSettled,
		SyncMerged:          nh.MergedEvents,
		SyncDropped:         nh.DroppedEvents,
		SyncOrphaned:        nh.OrphanedEvents,
		SyncKeptViews:       nh.KeptViews,
		SyncRepushSkipped:   nh.RepushSkipped,
		SyncRetainForgotten: nh.RetainForgotten,
		SyncRepushPending:   nh.RepushPending,
		PendingBytes:        nh.PendingBytes,
		Evictions:           nh.Evictions,
		DeadlineMisses:      nh.DeadlineMisses,
		Deadline:            nh.Deadline,
		Nodes:               nh.Nodes,
		NodesLive:           nh.Live,
		RosterAge:           nh.RosterAge,
		HeartbeatErrors:     nh.HeartbeatErrors,
	}
	if s.redis != nil && !nh.BreakerOpen {
		if err := s.redis.ConnectError(); err != nil {
			h.Up, h.Detail = false, err.Error()
		}
	}
	if nh.BreakerOpen {
		h.Breaker = metrics.BreakerOpen
	}
	return h
}
