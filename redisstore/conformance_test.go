package redisstore

import (
	"testing"

	"github.com/floodgate-dev/floodgate/store"
	"github.com/floodgate-dev/floodgate/storetest"
)

// TestConformance runs the store conformance suite on a real redis-server,
// with the callers' clock (the suite decides at the times it gives), and on
// a real three-primary Redis Cluster.
func TestConformance(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) store.Store { return newStore(t, Options{ClientTime: true}) })
	})
	t.Run("cluster", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) store.Store { return newClusterStore(t) })
	})
}
