package redisstore

import (
	"context"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
)

var _ store.Resetter = (*Store)(nil)

// Reset deletes the Redis key that holds key's state under a
// (store.Resetter): its next request starts with the whole allowance.
func (s *Store) Reset(ctx context.Context, a algorithm.Algorithm, key string) error {
	name, err := s.Key(a, key)
	if err != nil {
		return err
	}
	c, err := s.connect()
	if err != nil {
		return err
	}
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	return c.Do(ctx, c.B().Del().Key(name).Build()).Error()
}
