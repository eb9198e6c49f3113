package redisstore

import (
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
)

// TestScriptArgs checks that the script arguments come in the documented
// order, in the asked unit, and that a window of no whole unit is an error.
func TestScriptArgs(t *testing.T) {
	params := func(c algorithm.Config) algorithm.Params {
		t.Helper()
		a, err := algorithm.New(c)
		if err != nil {
			t.Fatal(err)
		}
		p, ok := paramsOf(a)
		if !ok {
			t.Fatalf("%s: no Params", c.Algorithm)
		}
		return p
	}
	p := params(algorithm.Config{Limit: 600, Window: time.Minute})
	args, err := scriptArgs(p, time.Microsecond)
	if err != nil || len(args) != 4 || args[0] != 600 || args[1] != 60_000_000 || args[2] != p.EntryUnits || args[3] != p.Entries {
		t.Fatalf("bounded-log script args %v, %v (params %+v)", args, err, p)
	}
	g := params(algorithm.Config{Algorithm: algorithm.GCRA, Limit: 10, Window: time.Second, Burst: 3})
	if args, _ := scriptArgs(g, time.Microsecond); len(args) != 4 || args[0] != 10 || args[1] != 3 || args[2] != 100_000 || args[3] != 300_000 {
		t.Fatalf("gcra script args %v", args)
	}
	f := params(algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 10, Window: time.Second + time.Nanosecond})
	if _, err := scriptArgs(f, time.Microsecond); err == nil {
		t.Fatalf("a window of %v is not whole µs, yet no error", time.Second+time.Nanosecond)
	}
	if _, ok := paramsOf(nil); ok {
		t.Fatalf("paramsOf(nil) ok")
	}
}
