package server

import (
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
)

// TestDelayedReadyWhileRedisSlow: a delayed node decides on its local view,
// so a Redis that answers a ping too slowly (here: stopped with SIGSTOP, so
// the ping runs out of time) leaves it ready as long as its breaker is
// closed; it becomes unready only when the breaker opens, after syncs have
// failed with nothing answered between them, and ready again when Redis
// resumes. Before, every slow ping made /readyz answer 503, which a key
// flood on a healthy Redis did several times a minute.
func TestDelayedReadyWhileRedisSlow(t *testing.T) {
	rs := redistest.Start(t)
	cfg := testConfig()
	if err := cfg.Store.SetURL("redis://" + rs.Addr()); err != nil {
		t.Fatal(err)
	}
	cfg.Arrangement.Mode = "delayed"
	cfg.Arrangement.SyncDeadline = time.Second
	r := start(t, cfg)
	waitReady(t, r, 10*time.Second)

	rs.Pause()
	resumed := false
	defer func() {
		if !resumed {
			rs.Resume()
		}
	}()
	readyWhileClosed, unready := 0, false
	deadline := time.Now().Add(60 * time.Second)
	for !unready {
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still 200 a minute after Redis stopped (health %+v)", r.srv.node.Health())
		}
		openBefore := r.srv.node.Health().BreakerOpen
		code, body := httpGet(t, r.url("/readyz"))
		openAfter := r.srv.node.Health().BreakerOpen
		switch {
		case code == 200 && !openBefore && !openAfter:
			readyWhileClosed++
		case code != 200 && !openBefore && !openAfter:
			t.Fatalf("/readyz %d %q with the breaker closed: a slow ping made the delayed node unready", code, body)
		case code != 200:
			unready = true // the breaker opened: syncs failed with nothing answered
		}
	}
	if readyWhileClosed == 0 {
		t.Fatal("the breaker opened before any /readyz answer: nothing checked while Redis was slow")
	}
	t.Logf("%d /readyz answers 200 while Redis was stopped and the breaker closed, then 503 once it opened", readyWhileClosed)
	rs.Resume()
	resumed = true
	waitReady(t, r, 30*time.Second)
}
