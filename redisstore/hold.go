package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/lease"
	"github.com/floodgate-dev/floodgate/store"
)

// Hold implements store.Holder: one script call (op 'q') applies op to the
// key of req, whose algorithm has holds, and decides req.Cost. The op
// carries its lease and seq, so sending it again after a timeout applies it
// once.
func (s *Store) Hold(ctx context.Context, now int64, req store.Request, op lease.Op) (algorithm.Decision, lease.Held, error) {
	if _, ok := req.Algorithm.(store.HoldAlgorithm); !ok {
		if req.Algorithm == nil {
			return algorithm.Decision{}, lease.Held{}, store.ErrNoAlgorithm
		}
		return algorithm.Decision{}, lease.Held{}, fmt.Errorf("redisstore: %s: %w", req.Algorithm.Name(), store.ErrNoHolds)
	}
	sp, err := s.specFor(req.Algorithm)
	if err != nil {
		return algorithm.Decision{}, lease.Held{}, err
	}
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	args := make([]string, 0, 8+len(sp.header))
	args = append(args, "q", s.now(now), itoa(op.ID.Hi), itoa(op.ID.Lo), itoa(op.Seq), itoa(op.Spent), itoa(op.Target))
	args = append(append(args, sp.header...), itoa(req.Cost))
	rs, err := s.exec(ctx, []call{{keys: []string{s.key(sp, req.Key)}, args: args}})
	if err != nil {
		return algorithm.Decision{}, lease.Held{}, err
	}
	var v [10]int64
	if err := decodeInts(rs[0], v[:]); err != nil {
		return algorithm.Decision{}, lease.Held{}, err
	}
	if v[5] < 0 || v[5] >= int64(len(reasons)) {
		return algorithm.Decision{}, lease.Held{}, fmt.Errorf("redisstore: script returned reason code %d", v[5])
	}
	held := lease.Held{Units: v[6], Granted: v[7], Repeat: v[9] == 1}
	if v[8] > 0 {
		held.TTL = time.Duration(v[8] * usec)
	}
	return decision(v[:6], sp), held, nil
}
