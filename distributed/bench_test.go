package distributed

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
)

// BenchmarkDecideOne measures one decision on a node whose shared store is
// an in-process memory store: the node's own cost per decision, without a
// network (for centralized, plus the memory store's and the deadline
// guard's).
func BenchmarkDecideOne(b *testing.B) {
	rule, err := algorithm.New(algorithm.Config{Algorithm: algorithm.BoundedLog, Limit: 1 << 30, Window: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("client-%04d", i)
	}
	for _, arr := range Arrangements() {
		b.Run(string(arr), func(b *testing.B) {
			n, err := New(Options{Arrangement: arr, Nodes: 8, Shared: newFaultStore(), Deadline: time.Second})
			if err != nil {
				b.Fatal(err)
			}
			defer n.Close(context.Background())
			now := time.Now().UnixNano()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := n.DecideOne(context.Background(), now+int64(i), store.Request{Algorithm: rule, Key: keys[i&1023], Cost: 1}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
