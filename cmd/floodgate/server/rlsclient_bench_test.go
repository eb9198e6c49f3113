package server_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/rlsclient"
)

// BenchmarkAllow measures one decision through floodgate serve on
// loopback, from parallel callers sharing one Client.
func BenchmarkAllow(b *testing.B) {
	addr, _, _ := serve(b)
	c, err := rlsclient.New(addr, rlsclient.Options{Domain: "api", Timeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			if _, err := c.Allow(ctx, "k"+strconv.Itoa(i%1000)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
