package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/server"
	"github.com/floodgate-dev/floodgate/distributed"
	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
	"github.com/floodgate-dev/floodgate/rlsclient"
)

// Two servers on one real redis-server: a charge sent to one puts the key
// in debt for checks on the other, in each arrangement, since charges and
// checks go to Redis itself.
func TestChargeSharedThroughRedis(t *testing.T) {
	rs := redistest.Start(t)
	for _, mode := range []distributed.Arrangement{distributed.Centralized, distributed.Delayed} {
		t.Run(string(mode), func(t *testing.T) {
			edit := func(c *server.Config) {
				c.Store = server.Store{Type: server.StoreRedis, Addrs: []string{rs.Addr()}, Prefix: "fg-" + string(mode)}
				c.Arrangement.Mode = mode
			}
			a, _, _ := serveWith(t, edit)
			b, _, _ := serveWith(t, edit)
			ca, _ := rlsclient.New(a, rlsclient.Options{Domain: "api", EntryKey: "tenant", Timeout: 2 * time.Second})
			cb, _ := rlsclient.New(b, rlsclient.Options{Domain: "api", EntryKey: "tenant", Timeout: 2 * time.Second})
			defer ca.Close()
			defer cb.Close()
			ctx := context.Background()
			if d, err := cb.Check(ctx, "acme"); err != nil || !d.Allowed || d.Remaining != 10000 {
				t.Fatalf("check on b: %+v %v", d, err)
			}
			if d, err := ca.Charge(ctx, "acme", 12000); err != nil || d.Remaining != 0 {
				t.Fatalf("charge on a: %+v %v", d, err)
			}
			if d, _ := cb.Check(ctx, "acme"); d.Allowed {
				t.Fatalf("check on b after a's charge: %+v, want the key in debt", d)
			}
		})
	}
}
