// Package quotalease serves Floodgate's quota leases
// (floodgate.quota.v1.QuotaLeases, package rlsclient/quotapb) over gRPC:
// clients take parts of a key's allowance, decide for themselves until they
// run out, top them up and give back the rest, each op decided by the rule
// engine's Hold.
package quotalease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-dev/floodgate/lease"
	"github.com/floodgate-dev/floodgate/rlsclient/quotapb"
	"github.com/floodgate-dev/floodgate/rules"
	"github.com/floodgate-dev/floodgate/store"
)

// Holder applies lease ops. *rules.Engine implements it.
type Holder interface {
	Hold(ctx context.Context, req rules.Request, need int64, op lease.Op) (rules.Result, lease.Held, error)
}

// MaxOps is the most ops one call may carry.
const MaxOps = 1024

// Service implements quotapb.QuotaLeasesServer.
type Service struct {
	quotapb.UnimplementedQuotaLeasesServer
	h   Holder
	log *slog.Logger
}

// New returns a Service that applies ops with h and logs to log (nil:
// slog.Default()).
func New(h Holder, log *slog.Logger) *Service {
	if log == nil {
		log = slog.Default()
	}
	return &Service{h: h, log: log}
}

// Register registers s on g.
func (s *Service) Register(g grpc.ServiceRegistrar) { quotapb.RegisterQuotaLeasesServer(g, s) }

// Lease applies every op of in, in order, and answers one grant per op. A
// malformed op makes the call INVALID_ARGUMENT (naming the op; ops before
// it were applied, and each is safe to send again with its seq); a store
// that cannot be reached makes it UNAVAILABLE.
func (s *Service) Lease(ctx context.Context, in *quotapb.LeaseRequest) (*quotapb.LeaseResponse, error) {
	if in.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "domain is empty: set the rule domain, as in RLS")
	}
	ops := in.GetOps()
	if len(ops) == 0 {
		return nil, status.Error(codes.InvalidArgument, "no ops: a call needs at least one")
	}
	if len(ops) > MaxOps {
		return nil, status.Errorf(codes.InvalidArgument, "%d ops: the most is %d", len(ops), MaxOps)
	}
	out := &quotapb.LeaseResponse{Grants: make([]*quotapb.Grant, len(ops))}
	for i, op := range ops {
		req, need, hop, err := parseOp(in.GetDomain(), op)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "op %d: %v", i, err)
		}
		res, held, err := s.h.Hold(ctx, req, need, hop)
		if err != nil {
			if ctx.Err() != nil {
				return nil, status.FromContextError(ctx.Err()).Err()
			}
			if errors.Is(err, rules.ErrInvalidRequest) {
				return nil, status.Errorf(codes.InvalidArgument, "op %d: %v", i, err)
			}
			s.log.Warn("quota lease: hold failed", "domain", req.Domain, "err", err)
			return nil, status.Errorf(codes.Unavailable, "op %d: %v", i, err)
		}
		out.Grants[i] = grant(res, held, hop)
	}
	return out, nil
}

// parseOp checks op and turns it into a rules request, the units to decide
// and the hold op. A new lease (no id) gets a fresh one.
func parseOp(domain string, op *quotapb.LeaseOp) (rules.Request, int64, lease.Op, error) {
	var hop lease.Op
	entries := op.GetEntries()
	if len(entries) == 0 {
		return rules.Request{}, 0, hop, errors.New("no entries: a key is described by at least one")
	}
	if len(entries) > rules.Max().Entries {
		return rules.Request{}, 0, hop, fmt.Errorf("%d entries: the most is %d", len(entries), rules.Max().Entries)
	}
	d := make(rules.Descriptor, len(entries))
	for i, e := range entries {
		if len(e.GetKey()) == 0 {
			return rules.Request{}, 0, hop, fmt.Errorf("entry %d has an empty key", i)
		}
		d[i] = rules.Entry{Key: string(e.GetKey()), Value: string(e.GetValue())}
	}
	limit := uint64(rules.Max().Limit)
	if op.GetNeed() > limit || op.GetSpent() > limit || op.GetTarget() > limit {
		return rules.Request{}, 0, hop, fmt.Errorf("need, spent and target are at most %d", limit)
	}
	if op.GetLease() == "" {
		if op.GetSpent() > 0 {
			return rules.Request{}, 0, hop, errors.New("spent units without a lease: name the lease they were held under")
		}
		hop.ID, hop.Seq = lease.New(), 1
	} else {
		id, err := lease.Parse(op.GetLease())
		if err != nil {
			return rules.Request{}, 0, hop, fmt.Errorf("lease %q: %v", clip(op.GetLease()), err)
		}
		if op.GetSeq() < 1 || op.GetSeq() > lease.MaxSeq {
			return rules.Request{}, 0, hop, fmt.Errorf("seq %d: want 1 to %d", op.GetSeq(), int64(lease.MaxSeq))
		}
		hop.ID, hop.Seq = id, int64(op.GetSeq())
	}
	hop.Spent, hop.Target = int64(op.GetSpent()), int64(op.GetTarget())
	return rules.Request{Domain: domain, Descriptors: []rules.Descriptor{d}}, int64(op.GetNeed()), hop, nil
}

// grant writes res and held as the answer to hop.
func grant(res rules.Result, held lease.Held, hop lease.Op) *quotapb.Grant {
	g := &quotapb.Grant{Allowed: res.Allowed, NoLease: res.NoLease, Unmatched: res.Unmatched != ""}
	if res.Tightest >= 0 {
		st := res.Statuses[res.Tightest]
		d := st.Decision
		g.Limit, g.Remaining = uint64(d.Limit), uint64(d.Remaining)
		g.ResetAfter, g.RetryAfter = durationpb.New(d.ResetAfter), durationpb.New(d.RetryAfter)
		if !res.Allowed {
			g.Reason = string(d.Reason)
		}
		switch st.Failure {
		case store.FailClosed:
			g.OnFailure = quotapb.Grant_CLOSED
		case store.FailLocal:
			g.OnFailure = quotapb.Grant_LOCAL
		}
	}
	g.Held, g.Granted, g.Repeat = uint64(held.Units), uint64(held.Granted), held.Repeat
	if held.TTL > 0 {
		g.Lease = hop.ID.String()
		g.Ttl = durationpb.New(held.TTL)
	}
	return g
}

// clip shortens s for an error message.
func clip(s string) string {
	const most = 40
	if len(s) > most {
		return s[:most] + "..."
	}
	return s
}
