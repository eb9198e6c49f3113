package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/floodgate-dev/floodgate/store"
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
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	res, err := s.exec(ctx, []call{c})
	if err != nil {
		return store.Census{}, err
	}
	var v [2]int64
	if err := decodeInts(res[0], v[:]); err != nil {
		return store.Census{}, fmt.Errorf("redisstore: heartbeat: %w", err)
	}
	return store.Census{Live: int(v[0]), New: v[1] == 1}, nil
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
