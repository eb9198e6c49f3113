package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// ExchangeOptions configures an Exchange.
type ExchangeOptions struct {
	// Region names this region, as the others' Outbox names it.
	Region string
	// Remotes are the other regions' stores, by name: each name must be
	// in the local store's Outbox, and each store must name its keys as
	// the local one does (the same Prefix and SlotsPerLimit).
	Remotes map[string]*Store
	// Holder names this exchanger for the lease that keeps one exchange
	// per pair of regions at a time (a node's name; empty: random).
	Holder string
	// Interval is how often counts are forwarded. Zero means one second.
	Interval time.Duration
	// Logger receives the links' failures and returns. Nil discards.
	Logger *slog.Logger
}

// Exchange forwards a region's counts to the other regions: every
// Interval, for each other region whose lease it holds, it seals the
// outbox of every hash slot (what was queued until then becomes a
// numbered batch), sends each sealed batch to the other region's Redis as
// a push with an identity (op 'S': the batch's region, slot and epoch, and
// its number), so that a batch sent again is applied there once, and
// drops it here once every part was applied. Any floodgate node may run
// it: the lease lets one at a time forward to each region, and a batch a
// stale holder sends again is a copy the other side skips.
//
// After a round that reached a region, it records the time in both
// regions' links (this one's sent, the other's received), which the
// heartbeat returns (store.Census.Links): a link that stops exchanging is
// how nodes learn a region is cut off.
type Exchange struct {
	local    *Store
	o        ExchangeOptions
	names    []string // Remotes' names, sorted
	epoch    string   // this exchanger's epoch, kept by a slot that has none
	lease    time.Duration
	log      *slog.Logger
	lastFail map[string]string // the last error logged per remote
}

// maxSealedKeys bounds the keys of one call forwarding a sealed batch.
const maxSealedKeys = 256

// NewExchange returns an exchange from local, configured by o.
func NewExchange(local *Store, o ExchangeOptions) (*Exchange, error) {
	if err := checkRegion(o.Region); err != nil {
		return nil, err
	}
	if slices.Contains(local.outbox, o.Region) {
		return nil, fmt.Errorf("redisstore: region %q is its own remote", o.Region)
	}
	x := &Exchange{local: local, o: o, log: o.Logger, lastFail: map[string]string{}}
	for name, r := range o.Remotes {
		if !slices.Contains(local.outbox, name) {
			return nil, fmt.Errorf("redisstore: region %q is not in the local store's Outbox %v", name, local.outbox)
		}
		if r.prefix != local.prefix || r.spread != local.spread {
			return nil, fmt.Errorf("redisstore: region %q names its keys otherwise (prefix %q, slots per limit %d; here %q, %d)",
				name, r.prefix, r.spread, local.prefix, local.spread)
		}
		x.names = append(x.names, name)
	}
	slices.Sort(x.names)
	if len(x.names) != len(local.outbox) {
		return nil, fmt.Errorf("redisstore: the local store's Outbox names %v, the exchange's Remotes %v", local.outbox, x.names)
	}
	if x.o.Interval <= 0 {
		x.o.Interval = time.Second
	}
	x.lease = 3 * x.o.Interval
	if x.o.Holder == "" {
		x.o.Holder = randomHex()
	}
	x.epoch = randomHex()
	if x.log == nil {
		x.log = slog.New(slog.DiscardHandler)
	}
	return x, nil
}

func randomHex() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Run exchanges every Interval until ctx ends.
func (x *Exchange) Run(ctx context.Context) {
	t := time.NewTicker(x.o.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		x.Step(ctx, time.Now().UnixNano())
	}
}

// Step makes one round, now, with every other region whose lease it takes,
// each region at the same time (a region that does not answer delays no
// other), and returns the rounds' errors joined. Steps must not overlap.
func (x *Exchange) Step(ctx context.Context, now int64) error {
	errs := make([]error, len(x.names))
	var wg sync.WaitGroup
	for i, name := range x.names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = x.round(ctx, now, name)
		}()
	}
	wg.Wait()
	for i, name := range x.names {
		err := errs[i]
		switch {
		case err == nil && x.lastFail[name] != "":
			x.log.Info("floodgate: counts reach region again", "region", name)
			delete(x.lastFail, name)
		case err != nil && x.lastFail[name] == "":
			x.log.Warn("floodgate: counts do not reach region; they wait in this region's Redis", "region", name, "err", err)
			x.lastFail[name] = err.Error()
		}
		if err != nil {
			errs[i] = fmt.Errorf("region %s: %w", name, err)
		}
	}
	return errors.Join(errs...)
}

// round forwards to region name what the outbox holds now.
func (x *Exchange) round(ctx context.Context, now int64, name string) error {
	l, r := x.local, x.o.Remotes[name]
	ctx, cancel := context.WithTimeout(ctx, max(x.lease, 10*time.Second))
	defer cancel()
	held, err := l.script(ctx, now, []string{l.exchangeKey("lease:" + name)}, "lease", x.o.Holder, itoa(x.lease.Milliseconds()))
	if err != nil {
		return err
	}
	if n, _ := held.AsInt64(); n != 1 {
		return nil // another node forwards to this region
	}
	client, err := l.connect()
	if err != nil {
		return err
	}
	tags, err := client.Do(ctx, client.B().Smembers().Key(l.exchangeKey("tags")).Build()).AsStrSlice()
	if err != nil {
		return fmt.Errorf("reading the outbox's tags: %w", err)
	}
	slices.Sort(tags)
	// Seal every slot's outbox (or take the batch sealed before and not
	// acknowledged), send every sealed batch in one pipeline (one round
	// trip to the region, however many slots), then drop them here. A pass
	// that sent batches sealed in an earlier round (the region did not
	// answer then) is followed by one for what queued since.
	for range maxPassesPerRound {
		again, err := x.pass(ctx, now, name, r, tags)
		if err != nil {
			return err
		}
		if !again {
			break
		}
	}
	// Every batch sealed in this round reached the region.
	if _, err := l.script(ctx, now, []string{l.exchangeKey("links")}, "link", "sent:"+name); err != nil {
		return err
	}
	rctx, cancel := r.deadline(ctx)
	defer cancel()
	_, err = r.script(rctx, now, []string{r.exchangeKey("links")}, "link", "recv:"+x.o.Region)
	return err
}

// maxPassesPerRound bounds the passes over the slots a round makes.
const maxPassesPerRound = 4

// pass seals and sends every slot's batch for region name, in one
// pipeline to r, and drops what r applied. It reports whether it sent a
// batch sealed in an earlier round.
func (x *Exchange) pass(ctx context.Context, now int64, name string, r *Store, tags []string) (bool, error) {
	l := x.local
	var calls []call
	var sent []sealedBatch
	old := false
	for _, tag := range tags {
		c, seq, ok, fresh, err := x.prepare(ctx, now, name, r, tag)
		if err != nil {
			return false, err
		}
		if ok {
			calls = append(calls, c...)
			sent = append(sent, sealedBatch{tag, seq})
			old = old || !fresh
		}
	}
	if len(calls) > 0 {
		// The other region's Timeout bounds the round trip, longer for a
		// big batch (after a long cut).
		rctx, cancel := context.WithTimeout(ctx, r.timeout*time.Duration(1+len(calls)/64))
		_, err := r.exec(rctx, calls)
		cancel()
		if err != nil {
			return false, err
		}
	}
	for _, b := range sent {
		if _, err := l.script(ctx, now, []string{l.sealedKey(b.tag, name), l.xstateKey(b.tag, name)}, "ack", itoa(b.seq)); err != nil {
			return false, err
		}
	}
	return old, nil
}

// sealedBatch is a slot's sealed batch sent in a round.
type sealedBatch struct {
	tag string
	seq int64
}

// prepare seals the outbox of tag for region name (or takes the batch
// sealed before and not yet acknowledged) and returns the calls that send
// it to r, with its number; ok is false when the slot has nothing to send,
// fresh true when the batch was sealed just now.
func (x *Exchange) prepare(ctx context.Context, now int64, name string, r *Store, tag string) (calls []call, seq int64, ok, fresh bool, err error) {
	l := x.local
	res, err := l.script(ctx, now, []string{l.outboxKey(tag, name), l.sealedKey(tag, name), l.xstateKey(tag, name)}, "seal", x.epoch)
	if err != nil {
		return nil, 0, false, false, err
	}
	v, err := res.ToArray()
	if err != nil || len(v) != 4 {
		return nil, 0, false, false, fmt.Errorf("sealing the outbox: %v", err)
	}
	seq, _ = v[0].AsInt64()
	has, _ := v[1].AsInt64()
	epoch, _ := v[2].ToString()
	justSealed, _ := v[3].AsInt64()
	if has != 1 {
		return nil, 0, false, false, nil
	}
	fields, err := x.sealed(ctx, l.sealedKey(tag, name))
	if err != nil {
		return nil, 0, false, false, err
	}
	calls, err = forwardCalls(r, r.now(now), x.o.Region+"/"+tag+"/"+epoch, uint64(seq), fields)
	if err != nil {
		return nil, 0, false, false, fmt.Errorf("sealed batch %d of slot %s: %w", seq, tag, err)
	}
	return calls, seq, true, justSealed == 1, nil
}

// sealed reads a sealed batch (which does not change) as its keys and
// values, sorted by key, so that a batch sent again splits into the same
// calls.
func (x *Exchange) sealed(ctx context.Context, key string) ([][2]string, error) {
	client, err := x.local.connect()
	if err != nil {
		return nil, err
	}
	var out [][2]string
	var cursor uint64
	for {
		e, err := client.Do(ctx, client.B().Hscan().Key(key).Cursor(cursor).Count(1024).Build()).AsScanEntry()
		if err != nil {
			return nil, fmt.Errorf("reading a sealed batch: %w", err)
		}
		for i := 0; i+1 < len(e.Elements); i += 2 {
			out = append(out, [2]string{e.Elements[i], e.Elements[i+1]})
		}
		if cursor = e.Cursor; cursor == 0 {
			break
		}
	}
	slices.SortFunc(out, func(a, b [2]string) int {
		switch {
		case a[0] < b[0]:
			return -1
		case a[0] > b[0]:
			return 1
		}
		return 0
	})
	out = slices.CompactFunc(out, func(a, b [2]string) bool { return a[0] == b[0] }) // HSCAN may return a field twice
	return out, nil
}

// forwardCalls turns a sealed batch (Redis key, outbox value) into op 'S'
// calls to r, at most maxSealedKeys keys each, numbered in order: each
// key's limit header and events, as a push carries them.
func forwardCalls(r *Store, t, origin string, seq uint64, fields [][2]string) ([]call, error) {
	var calls []call
	for first := 0; first < len(fields); first += maxSealedKeys {
		part := fields[first:min(len(fields), first+maxSealedKeys)]
		c := call{args: []string{"S", t, strconv.FormatUint(seq, 10), strconv.Itoa(len(calls)), itoa(defaultRemember.Milliseconds())}}
		var run string
		runAt := 0
		for _, f := range part {
			hdr, events, err := decodeOutbox(f[1])
			if err != nil {
				return nil, fmt.Errorf("key %q: %w", f[0], err)
			}
			if key := hdrKey(hdr); key != run {
				c.args = append(c.args, hdr...)
				c.args = append(c.args, "0")
				run, runAt = key, len(c.args)-1
			}
			n, _ := strconv.Atoi(c.args[runAt])
			c.args[runAt] = strconv.Itoa(n + 1)
			c.keys = append(c.keys, f[0])
			c.args = append(c.args, strconv.Itoa(len(events)/2))
			c.args = append(c.args, events...)
		}
		c.keys = append(c.keys, r.onceKey(c.keys[0], origin))
		calls = append(calls, c)
	}
	return calls, nil
}

// defaultRemember is how long a region remembers the batches it applied:
// longer than any copy of one stays in flight.
const defaultRemember = time.Hour

func hdrKey(hdr []string) string { return fmt.Sprint(hdr) }

// decodeOutbox splits an outbox value into the limit's header and its
// events (time µs, cost, ...), as the text op 'S' takes.
func decodeOutbox(v string) (hdr, events []string, err error) {
	if len(v) < 8 || len(v)%8 != 0 {
		return nil, nil, fmt.Errorf("an outbox value of %d bytes", len(v))
	}
	d := func(i int) int64 {
		var bits uint64
		for b := 7; b >= 0; b-- {
			bits = bits<<8 | uint64(v[8*i+b])
		}
		return int64(math.Float64frombits(bits))
	}
	nh := int(d(0))
	if nh < 4 || 8*(1+nh) > len(v) || (len(v)-8*(1+nh))%16 != 0 {
		return nil, nil, fmt.Errorf("an outbox value with a header of %d words in %d bytes", nh, len(v))
	}
	for i := 1; i <= nh; i++ {
		hdr = append(hdr, itoa(d(i)))
	}
	for i := 1 + nh; i < len(v)/8; i++ {
		events = append(events, itoa(d(i)))
	}
	return hdr, events, nil
}

// script runs one op 'x' step on s: keys, then the step's name and args.
func (s *Store) script(ctx context.Context, now int64, keys []string, what string, args ...string) (rueidis.RedisMessage, error) {
	res, err := s.exec(ctx, []call{{keys: keys, args: append([]string{"x", s.now(now), what}, args...)}})
	if err != nil {
		return rueidis.RedisMessage{}, err
	}
	return res[0].ToMessage()
}
