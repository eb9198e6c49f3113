package loadgen

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/gubernator"
	"github.com/floodgate-dev/floodgate/memstore"
)

// TestGubernatorTarget runs the generator against gubernator's API served
// by Floodgate's service: every call is answered, 1000 a second per key
// allowed and the rest over the limit.
func TestGubernatorTarget(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	gubernator.New(gubernator.Options{Store: memstore.New(memstore.Options{})}).Register(g)
	go g.Serve(ln)
	defer g.Stop()
	sum, err := Run(context.Background(), Config{Target: "gubernator://" + ln.Addr().String(), Keys: 1,
		Concurrency: 4, Duration: 300 * time.Millisecond, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Errors != 0 || sum.Allowed == 0 || sum.Allowed > 2000 || sum.Calls != sum.Allowed+sum.OverLimit {
		t.Fatalf("%+v", sum)
	}
}
