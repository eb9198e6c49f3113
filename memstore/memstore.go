// Package memstore is Floodgate's in-memory counter store.
package memstore

import (
	"context"
	"errors"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
)

// Options configures a Store.
type Options struct{}

// Store is not written yet; its owner replaces this file.
type Store struct{}

// New returns an empty store.
func New(o Options) *Store { return &Store{} }

// Decide implements store.Store.
func (s *Store) Decide(ctx context.Context, now int64, reqs []store.Request, out []algorithm.Decision) error {
	return errors.New("not implemented yet")
}

// DecideOne implements store.Store.
func (s *Store) DecideOne(ctx context.Context, now int64, req store.Request) (algorithm.Decision, error) {
	return algorithm.Decision{}, errors.New("not implemented yet")
}

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, now int64, reqs []store.Request) error {
	return errors.New("not implemented yet")
}
