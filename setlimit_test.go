package floodgate_test

import (
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate"
	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/store"
)

// TestSetLimitRefusesBadLimits: an invalid limit, or a change of a
// concurrency limit, is an error and changes nothing.
func TestSetLimitRefusesBadLimits(t *testing.T) {
	lim, err := floodgate.New(floodgate.Limit{Limit: 5, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for name, l := range map[string]floodgate.Limit{
		"zero limit":  {Limit: 0, Window: time.Second},
		"no window":   {Limit: 5},
		"unknown":     {Algorithm: "no-such", Limit: 5, Window: time.Second},
		"concurrency": {Algorithm: algorithm.Concurrency, Limit: 5, Window: time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			if err := lim.SetLimit(l); err == nil {
				t.Fatalf("SetLimit(%+v) succeeded", l)
			}
			if got := lim.Limit().Limit; got != 5 {
				t.Fatalf("a refused SetLimit changed the limit to %d", got)
			}
		})
	}
}

// onlyStore hides every method of a store but store.Store's.
type onlyStore struct{ store.Store }

// TestResetUnsupported: a store that cannot forget a key says so.
func TestResetUnsupported(t *testing.T) {
	lim, err := floodgate.New(floodgate.Limit{Limit: 5, Window: time.Second}, floodgate.WithStore(onlyStore{memstore.New(memstore.Options{})}))
	if err != nil {
		t.Fatal(err)
	}
	if err := lim.Reset(ctx, "k"); err != floodgate.ErrResetUnsupported {
		t.Fatalf("Reset = %v, want ErrResetUnsupported", err)
	}
}
