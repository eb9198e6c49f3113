package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/floodgate-dev/floodgate/rules"
	"github.com/floodgate-dev/floodgate/rules/ruleheader"
)

// Charger counts a cost known after the response. *rules.Engine
// implements it.
type Charger interface {
	Charge(ctx context.Context, req rules.Request) (rules.Result, error)
}

// Releaser gives back what a request held under concurrency rules, given
// the lease its check returned. *rules.Engine implements it.
type Releaser interface {
	Release(ctx context.Context, req rules.Request, lease string) (bool, error)
}

// ReleaseResponse is the answer to POST /v1/release.
type ReleaseResponse struct {
	// Released reports whether the lease held units for the request's
	// concurrency rules, which are now given back.
	Released bool `json:"released"`
	// Note says why nothing was released.
	Note string `json:"note,omitempty"`
}

// notHeld is ReleaseResponse.Note when a release changed nothing.
const notHeld = "the lease holds nothing for these descriptors: it was not returned by a check of them, was released already, or expired; nothing changed"

// handleSettle serves the calls that settle a request after it ran:
//
//	POST /v1/charge   the body of /v1/check; hits is the cost to count. It
//	                  is counted on every rule that applies (but concurrency
//	                  rules), without deciding and even past the limit, and
//	                  the answer is a CheckResponse that is always allowed,
//	                  each status saying what is left (see rules.Engine.Charge),
//	                  with RateLimit-Warning naming the rules in warning.
//	POST /v1/release  the body of the /v1/check that was allowed, with the
//	                  "lease" its answer carried; gives back what that
//	                  lease holds under concurrency rules, so those rules
//	                  work through the server. Answers {"released": true},
//	                  or {"released": false, "note": ...} when the lease
//	                  holds nothing for these descriptors (another
//	                  request's, released already, or expired): nothing
//	                  changes then.
//
// An engine that cannot charge or release answers 501.
func (a *api) handleSettle(mux *http.ServeMux) {
	mux.HandleFunc("/v1/charge", func(w http.ResponseWriter, r *http.Request) {
		req, ok := a.decodeNoLease(w, r)
		if !ok {
			return
		}
		c, ok := a.o.Engine.(Charger)
		if !ok {
			Error(w, http.StatusNotImplemented, "this server cannot charge")
			return
		}
		res, err := c.Charge(r.Context(), req)
		if a.failed(w, "charge", err) {
			return
		}
		ruleheader.SetWarning(w.Header(), res)
		writeJSON(w, http.StatusOK, NewCheckResponse(res))
	})
	mux.HandleFunc("/v1/release", func(w http.ResponseWriter, r *http.Request) {
		req, lease, ok := a.decode(w, r)
		if !ok {
			return
		}
		if lease == "" {
			Error(w, http.StatusBadRequest, `lease: give the "lease" the answer to /v1/check carried`)
			return
		}
		rel, ok := a.o.Engine.(Releaser)
		if !ok {
			Error(w, http.StatusNotImplemented, "this server cannot release")
			return
		}
		released, err := rel.Release(r.Context(), req, lease)
		if a.failed(w, "release", err) {
			return
		}
		out := ReleaseResponse{Released: released}
		if !released {
			out.Note = notHeld
		}
		writeJSON(w, http.StatusOK, out)
	})
}

// failed answers err, if any: 400 for a request past the engine's bounds,
// 503 otherwise.
func (a *api) failed(w http.ResponseWriter, what string, err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, rules.ErrInvalidRequest):
		Error(w, http.StatusBadRequest, err.Error())
	default:
		a.o.Logger.Warn("httpapi: "+what+" failed", "err", err)
		Error(w, http.StatusServiceUnavailable, "the limiter could not "+what+": "+err.Error())
	}
	return true
}

// decodeNoLease is decode for the endpoints that take no lease: a body
// with one is answered 400.
func (a *api) decodeNoLease(w http.ResponseWriter, r *http.Request) (rules.Request, bool) {
	req, lease, ok := a.decode(w, r)
	if ok && lease != "" {
		Error(w, http.StatusBadRequest, "lease: only /v1/release takes a lease")
		return req, false
	}
	return req, ok
}

// decode reads a POSTed CheckRequest body into a rules.Request and its
// lease, answering the error itself when it cannot.
func (a *api) decode(w http.ResponseWriter, r *http.Request) (rules.Request, string, bool) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		Error(w, http.StatusMethodNotAllowed, "use POST for "+r.URL.Path)
		return rules.Request{}, "", false
	}
	data, berr := readJSONBody(w, r, a.o.MaxBodyBytes, JSONOnly)
	if berr != nil {
		Error(w, berr.code, berr.msg)
		return rules.Request{}, "", false
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var in CheckRequest
	err := dec.Decode(&in)
	if err == nil {
		if _, err = dec.Token(); err == io.EOF {
			err = nil
		} else if err == nil {
			err = errors.New("data after the JSON object")
		}
	}
	if err != nil {
		Error(w, http.StatusBadRequest, "malformed request: "+err.Error())
		return rules.Request{}, "", false
	}
	req, err := in.toRequest()
	if err == nil {
		err = a.o.Overrides.Apply(&req)
	}
	if err != nil {
		Error(w, http.StatusBadRequest, err.Error())
		return rules.Request{}, "", false
	}
	return req, in.Lease, true
}
