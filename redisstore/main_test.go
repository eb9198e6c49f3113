package redisstore

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/internal/redistest"
)

// shared is the package's redis-server; tests that kill or pause a server
// start their own.
var shared *redistest.Server

var (
	clusterOnce sync.Once
	cluster     *redistest.Cluster
	clusterErr  error
	clusterStop func()
)

func TestMain(m *testing.M) {
	srv, stop, err := redistest.StartShared()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared = srv
	code := m.Run()
	stop()
	if clusterStop != nil {
		clusterStop()
	}
	os.Exit(code)
}

// sharedCluster starts the package's cluster on first use.
func sharedCluster(t testing.TB) *redistest.Cluster {
	t.Helper()
	clusterOnce.Do(func() {
		cluster, clusterStop, clusterErr = redistest.StartSharedCluster()
	})
	if clusterErr != nil {
		t.Fatal(clusterErr)
	}
	return cluster
}

// newStore returns a store on the shared server with a prefix of its own,
// so tests do not see each other's keys.
func newStore(t testing.TB, o Options) *Store {
	t.Helper()
	if o.Addrs == nil {
		o.Addrs = []string{shared.Addr()}
	}
	if o.Prefix == "" {
		o.Prefix = "t" + fmt.Sprint(time.Now().UnixNano())
	}
	s, err := New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustAlg(t testing.TB, c algorithm.Config) algorithm.Algorithm {
	t.Helper()
	a, err := algorithm.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
