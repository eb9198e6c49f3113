package httpapi

import (
	"context"
	"net/http"

	"github.com/floodgate-dev/floodgate/rules"
)

// Usager reports what keys have used and have left without counting.
// *rules.Engine implements it.
type Usager interface {
	Usage(ctx context.Context, req rules.Request) (rules.Result, error)
}

// handleUsage serves
//
//	POST /v1/usage  the body of /v1/check; counts nothing (hits and peek
//	                are ignored). The answer is a CheckResponse whose
//	                statuses give every applicable rule's used, remaining,
//	                limit, reset_after_ms, period_end (fixed-window and
//	                calendar rules) and warning; allowed says whether one
//	                more unit would be allowed. Statuses as /v1/check's
//	                (400, 405, 413, 415, 503).
//
// An engine that cannot report usage answers 501.
func (a *api) handleUsage(mux *http.ServeMux) {
	mux.HandleFunc("/v1/usage", func(w http.ResponseWriter, r *http.Request) {
		req, ok := a.decodeNoLease(w, r)
		if !ok {
			return
		}
		u, ok := a.o.Engine.(Usager)
		if !ok {
			Error(w, http.StatusNotImplemented, "this server cannot report usage")
			return
		}
		res, err := u.Usage(r.Context(), req)
		if a.failed(w, "report usage", err) {
			return
		}
		out := NewCheckResponse(res)
		finishCheck(w.Header(), &out, res, a.o.Engine.Set())
		writeJSON(w, http.StatusOK, out)
	})
}
