package rules

import (
	"context"
	"strconv"
	"testing"

	"github.com/floodgate-dev/floodgate/memstore"
)

// BenchmarkCheck decides requests against examples/rules.yaml, where four
// rules apply to each request, in the memory store.
func BenchmarkCheck(b *testing.B) {
	set, err := Load("../examples/rules.yaml")
	if err != nil {
		b.Fatal(err)
	}
	e := NewEngine(set, memstore.New(memstore.Options{}))
	reqs := make([]Request, 1024)
	for i := range reqs {
		reqs[i] = Request{Descriptors: []Descriptor{{
			{"ip", "10.1." + strconv.Itoa(i%256) + "." + strconv.Itoa(i/256)},
			{"member", "u" + strconv.Itoa(i)},
			{"path", "/loan/list"},
			{"method", "GET"},
		}}}
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := e.Check(ctx, reqs[i%len(reqs)]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckOneRule is the common single-limit path.
func BenchmarkCheckOneRule(b *testing.B) {
	e := NewEngine(Default(), memstore.New(memstore.Options{}))
	req := Request{Descriptors: []Descriptor{{{"ip", "10.0.0.9"}}}}
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := e.Check(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}
