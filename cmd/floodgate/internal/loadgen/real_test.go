package loadgen

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/httpapi"
	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/rls"
	"github.com/floodgate-dev/floodgate/rules"
)

// TestAgainstRealRLS drives Floodgate's own RLS service (rule engine over the
// memory store) over loopback and checks the generator's counts against the
// limit: one key with a limit of 5 a minute gets exactly 5 calls through,
// and every other call is over the limit.
func TestAgainstRealRLS(t *testing.T) {
	eng := realEngine(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rls.New(eng, slog.New(slog.NewTextHandler(io.Discard, nil))).Register(srv)
	go srv.Serve(ln)
	defer srv.Stop()
	checkExactlyFive(t, "grpc://"+ln.Addr().String())
}

// TestAgainstRealJSONAPI is the same over HTTP against the JSON API.
func TestAgainstRealJSONAPI(t *testing.T) {
	h, err := httpapi.New(httpapi.Options{Engine: realEngine(t), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	checkExactlyFive(t, srv.URL)
}

func realEngine(t *testing.T) *rules.Engine {
	t.Helper()
	set, err := rules.Parse("load.yaml", []byte(`
domain: loadtest
rules:
  - name: per-client
    match: {client: "*"}
    count_by: [client]
    limit: 5
    window: 1m
`))
	if err != nil {
		t.Fatal(err)
	}
	return rules.NewEngine(set, memstore.New(memstore.Options{}))
}

func checkExactlyFive(t *testing.T, target string) {
	t.Helper()
	s, err := Run(context.Background(), Config{
		Target: target, Concurrency: 4, Duration: 300 * time.Millisecond,
		Keys: 1, Domain: "loadtest",
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.Errors != 0 {
		t.Fatalf("errors: %+v", s.ErrorSamples)
	}
	if s.Calls <= 5 {
		t.Fatalf("only %d calls in 300 ms", s.Calls)
	}
	if s.Allowed != 5 || s.OverLimit != s.Calls-5 {
		t.Errorf("allowed %d over-limit %d of %d calls; the rule allows exactly 5", s.Allowed, s.OverLimit, s.Calls)
	}

	// A domain with no rules matches nothing: everything is allowed.
	s, err = Run(context.Background(), Config{
		Target: target, Concurrency: 2, Duration: 100 * time.Millisecond, Keys: 3, Domain: "other",
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.Errors != 0 || s.OverLimit != 0 || s.Allowed != s.Calls || s.Unmatched != s.Calls {
		t.Errorf("unknown domain: every call should be allowed and unmatched: %+v", s)
	}
	if s.Unmatched > 0 && s.Unmatched == s.Calls {
		var out strings.Builder
		s.WriteText(&out)
		if !strings.Contains(out.String(), "unmatched   "+strconv.FormatUint(s.Calls, 10)+" (100.0%)") || !strings.Contains(out.String(), "no rule applied to any call") {
			t.Errorf("summary does not show the unmatched share:\n%s", out.String())
		}
	}
	// In the rules' domain, calls that match are not unmatched.
	s, err = Run(context.Background(), Config{
		Target: target, Concurrency: 2, Duration: 100 * time.Millisecond, Keys: 3, Domain: "loadtest",
		Descriptors: []Descriptor{{{Key: "path", Value: "/x{}"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.Unmatched != s.Calls || s.Calls == 0 {
		t.Errorf("descriptors no rule matches: unmatched %d of %d calls", s.Unmatched, s.Calls)
	}
}
