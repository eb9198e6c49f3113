package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/floodgate-dev/floodgate/store"
)

// Sync records every batch's events into the shared state with the
// algorithm's Record and returns the merged state in each batch's State.
// All batches go out in one pipeline: one round trip per Redis node,
// however many keys; keys of one Cluster slot share a script call (at most
// 256 keys and 4,096 events per call, so that no call holds Redis long).
func (s *Store) Sync(ctx context.Context, now int64, batches []store.SyncBatch) error {
	return s.sync(ctx, now, nil, batches)
}

// SyncOnce is Sync that applies each script call of the batch list at most
// once: every call carries id and its place in the list, and the script
// keeps, per node instance and hash slot, a small record of the calls it
// applied (the highest Seq seen and which calls of it), kept for
// id.Remember after the last one. A call sent again is skipped but still
// returns the current states. The calls of a list depend only on the
// batches, so a list sent again splits into the same calls.
func (s *Store) SyncOnce(ctx context.Context, now int64, id store.SyncID, batches []store.SyncBatch) error {
	if id.Origin == "" {
		return errors.New("redisstore: SyncOnce needs an id with an Origin")
	}
	return s.sync(ctx, now, &id, batches)
}

// onceKey returns the key holding the record of the calls applied from
// origin, in the hash slot of key (every key this store writes has a hash
// tag, so the record shares the slot of the call's keys in a Cluster).
func (s *Store) onceKey(key, origin string) string {
	return s.prefix + ":{" + tagOf(key) + "}:sync-once:" + origin
}

// tagOf returns key's hash tag (empty if it has none).
func tagOf(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return ""
}

func (s *Store) sync(ctx context.Context, now int64, id *store.SyncID, batches []store.SyncBatch) error {
	if len(batches) == 0 {
		return nil
	}
	rs := make([]request, len(batches))
	for i := range batches {
		sp, err := s.specFor(batches[i].Algorithm)
		if err != nil {
			return fmt.Errorf("batch %d: %w", i, err)
		}
		rs[i] = request{sp: sp, key: s.key(sp, batches[i].Key)}
	}
	// A caller's own deadline bounds a sync, not the store's Timeout: a
	// delayed node gives a push that missed its deadline more time when it
	// sends it again, and capping that at Timeout would fail it forever.
	cancel := context.CancelFunc(func() {})
	if _, ok := ctx.Deadline(); !ok {
		ctx, cancel = s.deadline(ctx)
	}
	defer cancel()
	calls, parts := s.syncCalls(now, id, rs, batches)
	if len(s.outbox) > 0 && id != nil {
		if err := s.listTags(ctx, calls); err != nil {
			return err
		}
	}
	res, err := s.exec(ctx, calls)
	if err != nil {
		return err
	}
	var words []int64
	for p, part := range parts {
		v, err := res[p].ToArray()
		if err != nil {
			return fmt.Errorf("redisstore: reading synced state: %w", err)
		}
		per := 1 // values per key: the state, and with unseen its unseen cost
		if calls[p].unseen {
			per = 2
		}
		if len(v) != per*len(part) {
			return fmt.Errorf("redisstore: script returned %d values for %d keys", len(v), len(part))
		}
		for k, i := range part {
			sp := rs[i].sp
			if per == 2 {
				u, err := v[2*k+1].AsInt64()
				if err != nil {
					return fmt.Errorf("redisstore: reading a key's unseen cost: %w", err)
				}
				batches[i].Unseen = u
			}
			packed, err := v[per*k].ToString()
			if err != nil {
				return fmt.Errorf("redisstore: reading synced state: %w", err)
			}
			if sp.code == codeBoundedLog && oneTime(packed) {
				words = oneTimeState(packed, sp.luaWords, words)
			} else if words, err = unpackState(packed, sp.luaWords, words); err != nil {
				return fmt.Errorf("redisstore: batch %d: %w", i, err)
			} else if sp.code == codeGubernator {
				gubernatorState(packed, words)
			}
			b := &batches[i]
			if len(b.State) != sp.goWords {
				b.State = make([]int64, sp.goWords)
			}
			sp.toGo(words, b.State)
		}
	}
	return nil
}

// syncCalls splits a sync into script calls: per group of keys (a Cluster
// slot), at most maxBatchKeys keys and maxBatchEvents events per call. It
// returns the calls and, per call, the batch of each key it holds. With an
// id, each call is op 'S' with the id and its place in its group.
//
// A call sends a limit's header once per run of keys of that limit (the
// header, then the run's length, then each key's events): a push to one
// limit's many light keys carries the header once instead of per key.
func (s *Store) syncCalls(now int64, id *store.SyncID, rs []request, batches []store.SyncBatch) ([]call, [][]int) {
	t := s.now(now)
	var calls []call
	var parts [][]int
	for _, idx := range s.groups(rs) {
		var c call
		var part []int
		var run *spec
		runAt, runLen := 0, 0 // index in c.args of the current run's length, and the length
		events, chunk := 0, 0
		outbox := len(s.outbox) > 0 && id != nil
		unseen := outbox && wantUnseen(batches, idx)
		flush := func() {
			if len(part) > 0 {
				if outbox {
					// The outboxes, then the sealed batches, of the slot.
					tag := tagOf(c.keys[0])
					for _, r := range s.outbox {
						c.keys = append(c.keys, s.outboxKey(tag, r))
					}
					for _, r := range s.outbox {
						c.keys = append(c.keys, s.sealedKey(tag, r))
					}
				}
				if id != nil {
					// The record's key goes last; the script takes it off.
					c.keys = append(c.keys, s.onceKey(c.keys[0], id.Origin))
				}
				calls, parts = append(calls, c), append(parts, part)
				chunk++
			}
			c, part, events, run = call{args: []string{"s", t}}, nil, 0, nil
			if id != nil {
				remember := max(id.Remember.Milliseconds(), 1)
				c.args = []string{"S", t, strconv.FormatUint(id.Seq, 10), strconv.Itoa(chunk), itoa(remember)}
			}
			if outbox {
				c.args[0] = "X"
				c.args = append(c.args, strconv.Itoa(len(s.outbox)), "0")
				if unseen {
					c.args[len(c.args)-1], c.unseen = "1", true
				}
			}
		}
		flush()
		for _, i := range idx {
			evs := batches[i].Events
			for first := true; first || len(evs) > 0; first = false {
				if len(part) == maxBatchKeys || events >= maxBatchEvents {
					flush()
				}
				// A key with more events than fit goes on in the next call
				// of the same pipeline; the last call's state is the result.
				n := min(len(evs), maxBatchEvents-events)
				sp := rs[i].sp
				if sp != run {
					c.args = append(c.args, sp.headerAt(now)...)
					if unseen {
						c.args = append(c.args, itoa(floorDiv(unseenSince(batches[i], now), usec)))
					}
					c.args = append(c.args, "0")
					run, runAt, runLen = sp, len(c.args)-1, 0
				}
				runLen++
				c.args[runAt] = strconv.Itoa(runLen)
				c.keys = append(c.keys, rs[i].key)
				c.args = appendEvents(c.args, evs[:n])
				part = append(part, i)
				events += n
				evs = evs[n:]
			}
		}
		flush()
	}
	return calls, parts
}

// appendEvents appends a key's events as op 's' takes them: the number of
// events, then each event's time in µs and cost; when every cost is 1, the
// negated number of events, then the times alone.
func appendEvents(args []string, evs []store.Event) []string {
	ones := true
	for _, e := range evs {
		ones = ones && e.Cost == 1
	}
	if ones && len(evs) > 0 {
		args = append(args, strconv.Itoa(-len(evs)))
		for _, e := range evs {
			args = append(args, itoa(floorDiv(e.Time, usec)))
		}
		return args
	}
	args = append(args, strconv.Itoa(len(evs)))
	for _, e := range evs {
		args = append(args, itoa(floorDiv(e.Time, usec)), itoa(e.Cost))
	}
	return args
}

// oneTime reports whether a synced state is bounded-log's one-time form:
// the count (1 to 999) and then the time in 16 digits, 17 to 19 digits in
// all (never a multiple of 8 bytes, so never doubles).
func oneTime(packed string) bool {
	if len(packed) < 17 || len(packed) > 19 || packed[0] == '0' {
		return false
	}
	for i := 0; i < len(packed); i++ {
		if packed[i] < '0' || packed[i] > '9' {
			return false
		}
	}
	return true
}

// oneTimeState returns the n state words of a one-time form (see oneTime):
// one entry of count units, all at one time, as the script reads it.
func oneTimeState(packed string, n int, buf []int64) []int64 {
	buf = slices.Grow(buf[:0], n)[:n]
	clear(buf)
	c, _ := strconv.ParseInt(packed[:len(packed)-16], 10, 64)
	t, _ := strconv.ParseInt(packed[len(packed)-16:], 10, 64)
	buf[0], buf[1], buf[2] = 1<<52+c<<18+1, t, t
	return buf
}

// unpackState decodes a state as the script stores it, little-endian
// doubles with the trailing zero words left out, into n words, reusing buf.
func unpackState(packed string, n int, buf []int64) ([]int64, error) {
	if len(packed)%8 != 0 || len(packed) > 8*n {
		return buf, fmt.Errorf("script returned a state of %d bytes, want a multiple of 8 up to %d", len(packed), 8*n)
	}
	buf = slices.Grow(buf[:0], n)[:n]
	clear(buf)
	for j := 0; j < len(packed)/8; j++ {
		var bits uint64
		for b := 7; b >= 0; b-- {
			bits = bits<<8 | uint64(packed[8*j+b])
		}
		buf[j] = int64(math.Float64frombits(bits))
	}
	return buf, nil
}
