//go:build !redisfloor

package redisstore

import (
	"context"

	"github.com/redis/rueidis"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
)

// floorMode is empty outside builds with the redisfloor tag (see floor.go):
// the compiler drops the branches that test it, and the two methods below
// are never called.
const floorMode = ""

func (s *Store) floorShared(context.Context, []*pending) {}

func (s *Store) floorAlone(context.Context, store.Request, *spec, string) (algorithm.Decision, error) {
	return algorithm.Decision{}, nil
}

func (s *Store) floorSync(context.Context, []call) ([]rueidis.RedisResult, error) {
	return nil, nil
}
