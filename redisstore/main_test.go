package redisstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
	"github.com/floodgate-dev/floodgate/internal/testkit/testmain"
)

// shared is the package's redis-server; tests that kill or pause a server
// start their own. It is nil when redis-server is not installed: noRedis
// then says why, and the tests that need Redis skip.
var (
	shared  *redistest.Server
	noRedis string
)

var (
	clusterOnce sync.Once
	cluster     *redistest.Cluster
	clusterErr  error
	clusterStop func()
)

func TestMain(m *testing.M) {
	testmain.Setup()
	srv, stop, err := redistest.StartShared()
	switch {
	case errors.Is(err, redistest.ErrNotInstalled):
		noRedis = err.Error()
		stop = func() {}
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared = srv
	code := m.Run()
	stop()
	if clusterStop != nil {
		clusterStop()
	}
	os.Exit(testmain.Check(code))
}

// sharedCluster starts the package's cluster on first use.
func sharedCluster(t testing.TB) *redistest.Cluster {
	t.Helper()
	needRedis(t)
	clusterOnce.Do(func() {
		cluster, clusterStop, clusterErr = redistest.StartSharedCluster()
	})
	if clusterErr != nil {
		t.Fatal(clusterErr)
	}
	return cluster
}

// newStore returns a store on the shared server with a prefix of its own,
// so tests do not see each other's keys, and a minute's timeout unless o
// sets one.
func newStore(t testing.TB, o Options) *Store {
	t.Helper()
	needRedis(t)
	if o.Addrs == nil {
		o.Addrs = []string{shared.Addr()}
	}
	if o.Prefix == "" {
		o.Prefix = "t" + fmt.Sprint(time.Now().UnixNano())
	}
	if o.Timeout == 0 {
		// Not the default second: on a loaded machine a big sync or the
		// first SCRIPT LOAD can take longer, and a slow answer is not what
		// these tests look for (a fault test sets its own timeout).
		o.Timeout = time.Minute
	}
	s, err := New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// needRedis skips t when the package has no redis-server.
func needRedis(t testing.TB) {
	t.Helper()
	if shared == nil {
		t.Skip(noRedis)
	}
}

func mustAlg(t testing.TB, c algorithm.Config) algorithm.Algorithm {
	t.Helper()
	a, err := algorithm.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
