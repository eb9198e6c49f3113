package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/httpapi"
)

// httpCaller posts to the JSON API's /v1/check. A 429 answer, or a 200 whose
// body says "allowed": false or "overall_code": "OVER_LIMIT", is over limit; a
// 200 otherwise is allowed; anything else is an error.
type httpCaller struct {
	url    string
	client *http.Client
	bodies [][]byte
}

// checkResponse holds the fields of the JSON API's answer that decide the
// outcome; the rest is ignored.
type checkResponse struct {
	Allowed     *bool  `json:"allowed"`
	OverallCode string `json:"overall_code"`
	Unmatched   string `json:"unmatched"`
	// OverallCodeCamel is envoyproxy/ratelimit's POST /json spelling.
	OverallCodeCamel string `json:"overallCode"`
}

func newHTTPCaller(c *Config, url string) (*httpCaller, error) {
	tr := &http.Transport{
		MaxIdleConns:        c.Concurrency,
		MaxIdleConnsPerHost: c.Concurrency,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
	h := &httpCaller{url: url, client: &http.Client{Transport: tr}}
	h.bodies = make([][]byte, c.Keys)
	for k := range c.Keys {
		req := httpapi.CheckRequest{Domain: c.Domain, Hits: int64(c.Hits)}
		for _, d := range c.descriptorsFor(k) {
			var jd httpapi.Descriptor
			for _, e := range d {
				jd.Entries = append(jd.Entries, httpapi.Entry{Key: e.Key, Value: e.Value})
			}
			req.Descriptors = append(req.Descriptors, jd)
		}
		b, err := json.Marshal(req)
		if err != nil {
			return nil, err
		}
		h.bodies[k] = b
	}
	return h, nil
}

func (h *httpCaller) call(ctx context.Context, worker, key int) (Outcome, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(h.bodies[key]))
	if err != nil {
		return Failed, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.client.Do(req)
	if err != nil {
		return Failed, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return Failed, err
	}
	switch resp.StatusCode {
	case http.StatusTooManyRequests:
		return OverLimit, nil
	case http.StatusOK:
	default:
		snippet := bytes.TrimSpace(body)
		if len(snippet) > 120 {
			snippet = snippet[:120]
		}
		return Failed, fmt.Errorf("HTTP %d: %s", resp.StatusCode, snippet)
	}
	var r checkResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return Failed, fmt.Errorf("decoding /v1/check answer: %v", err)
	}
	if r.OverallCode == "" {
		r.OverallCode = r.OverallCodeCamel
	}
	switch {
	case r.OverallCode == "OVER_LIMIT" || (r.Allowed != nil && !*r.Allowed):
		return OverLimit, nil
	case r.Unmatched != "":
		return Unmatched, nil
	case r.OverallCode == "OK" || (r.Allowed != nil && *r.Allowed):
		return Allowed, nil
	default:
		return Failed, fmt.Errorf("/v1/check answer has neither allowed nor overall_code: %.120s", body)
	}
}

func (h *httpCaller) close() error {
	h.client.CloseIdleConnections()
	return nil
}
