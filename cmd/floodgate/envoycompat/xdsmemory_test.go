package envoycompat

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// manyDescriptors is a config of n descriptors {k: vNNNNNN} of 10 a
// second, as a RateLimitConfig the xDS server pushes (its wire bytes, as
// the stream receives them) and as the YAML file with the same rules.
func manyDescriptors(t testing.TB, n int) (wire, text []byte) {
	t.Helper()
	c := &rlconfv3.RateLimitConfig{Name: "many", Domain: "many"}
	var b strings.Builder
	b.WriteString("domain: many\ndescriptors:\n")
	for i := range n {
		c.Descriptors = append(c.Descriptors, &rlconfv3.RateLimitDescriptor{Key: "k", Value: fmt.Sprintf("v%06d", i),
			RateLimit: &rlconfv3.RateLimitPolicy{Unit: rlconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 10}})
		fmt.Fprintf(&b, "  - key: k\n    value: v%06d\n    rate_limit: {unit: second, requests_per_unit: 10}\n", i)
	}
	a, err := anypb.New(c)
	if err != nil {
		t.Fatal(err)
	}
	if wire, err = proto.Marshal(a); err != nil {
		t.Fatal(err)
	}
	return wire, []byte(b.String())
}

// peakHeapGrowth runs f with the collector running at every 10% of
// growth, sampling the heap's live objects every 100 µs, and returns the
// most they grew above where they stood before f.
func peakHeapGrowth(f func()) uint64 {
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 { metrics.Read(s); return s[0].Value.Uint64() }
	base := read()
	var peak atomic.Uint64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(100 * time.Microsecond)
		defer t.Stop()
		for {
			if v := read(); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	f()
	if v := read(); v > peak.Load() {
		peak.Store(v)
	}
	close(stop)
	<-done
	return peak.Load() - min(base, peak.Load())
}

// TestXDSConfigMemoryNearFile loads the same 30,000 descriptors as a
// RateLimitConfig received over xDS (the wire bytes unmarshaled, turned
// into rule files, loaded) and as a rule file, and holds the xDS path's
// peak heap growth within twice the file's. (Written out as YAML and
// parsed again, the xDS path took about ten times the file's.)
func TestXDSConfigMemoryNearFile(t *testing.T) {
	const n = 30000
	wire, text := manyDescriptors(t, n)
	var xdsCfg, fileCfg *Config
	xds := peakHeapGrowth(func() {
		a := &anypb.Any{}
		if err := proto.Unmarshal(wire, a); err != nil {
			t.Fatal(err)
		}
		files, err := xdsFiles([]*anypb.Any{a})
		if err != nil {
			t.Fatal(err)
		}
		if xdsCfg, err = LoadConfig(files, false, WildcardsTrailing); err != nil {
			t.Fatal(err)
		}
	})
	file := peakHeapGrowth(func() {
		var err error
		if fileCfg, err = LoadConfig([]File{{Name: "many", Text: text}}, false, WildcardsTrailing); err != nil {
			t.Fatal(err)
		}
	})
	for _, c := range []*Config{xdsCfg, fileCfg} {
		if m := c.lookup("many", []entry{{"k", fmt.Sprintf("v%06d", n-1)}}); m.limit == nil || m.limit.perUnit != 10 {
			t.Fatalf("the last descriptor did not load: %+v", m)
		}
	}
	t.Logf("%d descriptors (%d bytes over xDS, %d as YAML): peak heap growth %.1f MB over xDS, %.1f MB from a file (ratio %.2f)",
		n, len(wire), len(text), float64(xds)/1e6, float64(file)/1e6, float64(xds)/float64(file))
	if xds > 2*file {
		t.Errorf("loading over xDS grew the heap by %d bytes, over twice the %d from a file", xds, file)
	}
}
