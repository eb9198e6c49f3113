package statuspage_test

import (
	"context"
	"net/http"
	"time"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/metrics"
	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/statuspage"
	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/rules"
)

// source joins the engine's rules and the recorder's figures.
type source struct {
	eng *rules.Engine
	rec *metrics.Recorder
}

func (s source) Rules() []rules.RuleInfo    { return s.eng.Set().Rules() }
func (s source) Snapshot() metrics.Snapshot { return s.rec.Snapshot() }

// Example wires a rule engine, a metrics recorder and the status page the
// way a server does: every check is timed and observed, /metrics and the page
// share one mux.
func Example() {
	eng := rules.NewEngine(rules.Default(), memstore.New(memstore.Options{}))
	rec := metrics.New()
	rec.SetStore(metrics.StoreHealth{Type: "memory", Arrangement: "local", Up: true})

	check := func(ctx context.Context, req rules.Request) (rules.Result, error) {
		start := time.Now()
		res, err := eng.Check(ctx, req)
		if err != nil {
			rec.ObserveError(time.Since(start))
			return res, err
		}
		rec.Observe(res, time.Since(start))
		return res, nil
	}
	_ = check

	mux := http.NewServeMux()
	mux.Handle("/metrics", rec.Handler())
	mux.Handle("/", statuspage.Handler(source{eng, rec}))
	_ = mux // http.ListenAndServe("127.0.0.1:8080", mux)
}
