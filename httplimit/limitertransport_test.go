package httplimit_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate-dev/floodgate"
	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/httplimit"
)

// countingBase answers every call and counts them, without a network, so
// the tests can run on synctest's clock.
type countingBase struct{ calls int }

func (b *countingBase) RoundTrip(r *http.Request) (*http.Response, error) {
	b.calls++
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("ok")), Request: r}, nil
}

// A client that calls a dependency limited to 2 a second, ported from a
// loop over x/time/rate's Wait: ten calls take four and a half seconds and
// all are sent.
func TestLimiterTransportWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim, err := floodgate.New(floodgate.Limit{Algorithm: algorithm.GCRA, Limit: 2, Window: time.Second, Burst: 1})
		if err != nil {
			t.Fatal(err)
		}
		base := &countingBase{}
		client := &http.Client{Transport: &httplimit.LimiterTransport{Base: base, Limiter: lim}}
		start := time.Now()
		for i := range 10 {
			resp, err := client.Get("http://dependency.test/x")
			if err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
			resp.Body.Close()
		}
		if took := time.Since(start); base.calls != 10 || took < 4500*time.Millisecond {
			t.Fatalf("%d calls sent in %v, want 10 in at least 4.5s", base.calls, took)
		}
	})
}

func TestLimiterTransportFails(t *testing.T) {
	// The default algorithm's window starts at the first request, so the
	// third call waits most of an hour whenever the test runs; a fixed
	// window ends on the hour, and a run that crossed it was let through.
	lim, err := floodgate.New(floodgate.Limit{Limit: 2, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	base := &countingBase{}
	for _, c := range []struct {
		name, host string
		tr         *httplimit.LimiterTransport
		ctx        func() (context.Context, context.CancelFunc)
	}{
		{"no wait", "a.test", &httplimit.LimiterTransport{Base: base, Limiter: lim, NoWait: true}, nil},
		{"deadline before the retry", "b.test", &httplimit.LimiterTransport{Base: base, Limiter: lim},
			func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), time.Minute)
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.Background(), func() {}
			if c.ctx != nil {
				ctx, cancel = c.ctx()
			}
			defer cancel()
			client := &http.Client{Transport: c.tr}
			base.calls = 0
			for i := range 3 {
				req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+c.host+"/x", nil)
				resp, err := client.Do(req)
				if i < 2 {
					if err != nil {
						t.Fatalf("call %d: %v", i, err)
					}
					resp.Body.Close()
					continue
				}
				var le *httplimit.LimitError
				if !errors.As(err, &le) || le.RetryAfter <= 0 {
					t.Fatalf("3rd call: %v, want a *LimitError with RetryAfter", err)
				}
			}
			if base.calls != 2 {
				t.Fatalf("%d calls sent, want 2", base.calls)
			}
		})
	}
}
