package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/floodgate-dev/floodgate/store"
	"github.com/redis/rueidis"
)

var _ store.Roster = (*Store)(nil)

// maxGroupName bounds a roster group's name, which is part of two keys.
const maxGroupName = 64

// Heartbeat implements store.Roster with op 'h': the group's members are
// a sorted set scored by when each member's count expires (Redis server
// time, or now with ClientTime), under the hash tag {members/GROUP} (one
// slot in a Cluster). A group's name is 1 to 64 letters, digits, '.', '_'
// or '-'.
func (s *Store) Heartbeat(ctx context.Context, now int64, b store.Beat) (store.Census, error) {
	if err := checkGroup(b.Group); err != nil {
		return store.Census{}, err
	}
	if b.Member == "" {
		return store.Census{}, errors.New("redisstore: a heartbeat needs a Member")
	}
	expiry := b.Expiry.Milliseconds()
	if !b.Leave && expiry < 1 {
		return store.Census{}, fmt.Errorf("redisstore: a heartbeat needs an Expiry of at least 1ms, got %v", b.Expiry)
	}
	leave := "0"
	if b.Leave {
		leave = "1"
	}
	c := call{keys: []string{s.prefix + ":{members/" + b.Group + "}:live"}, args: []string{"h", s.now(now), b.Member, itoa(expiry), leave}}
	calls := []call{c}
	if len(s.outbox) > 0 {
		calls = append(calls, call{keys: []string{s.exchangeKey("links")}, args: []string{"x", s.now(now), "links"}})
	}
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	res, err := s.exec(ctx, calls)
	if err != nil {
		return store.Census{}, err
	}
	var v [3]int64
	if err := decodeInts(res[0], v[:]); err != nil {
		return store.Census{}, fmt.Errorf("redisstore: heartbeat: %w", err)
	}
	census := store.Census{Live: int(v[0]), New: v[1] == 1, Now: v[2] * usec}
	if len(calls) > 1 {
		if census.Links, err = s.links(res[1]); err != nil {
			return store.Census{}, fmt.Errorf("redisstore: heartbeat: %w", err)
		}
	}
	return census, nil
}

// links reads op 'x' links' answer: the time, then pairs of a field
// ("sent:REGION" or "recv:REGION") and its time in µs; every region of the
// Outbox is listed, with zero times for what never happened.
func (s *Store) links(r rueidis.RedisResult) ([]store.Link, error) {
	v, err := r.ToArray()
	if err != nil {
		return nil, err
	}
	out := make([]store.Link, len(s.outbox))
	for i, name := range s.outbox {
		out[i].Region = name
	}
	for i := 1; i+1 < len(v); i += 2 {
		f, _ := v[i].ToString()
		t, err := v[i+1].AsInt64()
		if err != nil {
			return nil, err
		}
		kind, name, _ := strings.Cut(f, ":")
		for j := range out {
			if out[j].Region != name {
				continue
			}
			switch kind {
			case "sent":
				out[j].Sent = t * usec
			case "recv":
				out[j].Received = t * usec
			}
		}
	}
	return out, nil
}

// checkGroup reports whether g can name a roster group.
func checkGroup(g string) error {
	if g == "" || len(g) > maxGroupName {
		return fmt.Errorf("redisstore: a roster group's name is 1 to %d characters, got %d", maxGroupName, len(g))
	}
	for i := 0; i < len(g); i++ {
		c := g[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("redisstore: roster group %q: only letters, digits, '.', '_' and '-'", g)
		}
	}
	return nil
}
