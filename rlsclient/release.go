package rlsclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/floodgate-dev/floodgate"
	"github.com/floodgate-dev/floodgate/algorithm"
)

// ErrNoHTTP is returned by a Lease's Release when Options.HTTPURL is
// empty.
var ErrNoHTTP = errors.New("rlsclient: releasing a lease needs Options.HTTPURL, the server's JSON API (RLS has no release call)")

type entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

type descriptor struct {
	Entries []entry `json:"entries"`
}

type releaseRequest struct {
	Domain      string       `json:"domain"`
	Descriptors []descriptor `json:"descriptors"`
	Hits        int64        `json:"hits"`
	Lease       string       `json:"lease"`
}

type releaseResponse struct {
	Released bool   `json:"released"`
	Note     string `json:"note"`
}

// Acquire is AllowN that returns what the request holds: Lease.Decision is
// the decision, and Lease.Release gives back what the server's concurrency
// rules hold for it, through the server's JSON API (POST /v1/release with
// the lease the server returned; RLS has no release call). Only that lease
// releases those units, once; unreleased, they come back when it expires.
// When no concurrency rule counted the request, or the failure policy
// decided it, Release does nothing.
func (c *Client) Acquire(ctx context.Context, key string, n int64) (*floodgate.Lease, error) {
	if n < 1 {
		return floodgate.NewLease(Decision{Reason: algorithm.ReasonBadCost}, nil), nil
	}
	d, lease, err := c.callLease(ctx, key, uint64(n))
	if err != nil {
		d, err = c.absorb(d, err)
		return floodgate.NewLease(d, nil), err
	}
	if lease == "" {
		return floodgate.NewLease(d, nil), nil
	}
	return floodgate.NewLease(d, func(ctx context.Context) error { return c.release(ctx, key, n, lease) }), nil
}

// release posts lease for key to the server's /v1/release.
func (c *Client) release(ctx context.Context, key string, n int64, lease string) error {
	if c.o.HTTPURL == "" {
		return ErrNoHTTP
	}
	ctx, cancel := context.WithTimeout(ctx, c.o.Timeout)
	defer cancel()
	in := releaseRequest{Domain: c.o.Domain, Hits: n, Lease: lease}
	d := descriptor{}
	for _, e := range c.describe(key) {
		d.Entries = append(d.Entries, entry(e))
	}
	in.Descriptors = []descriptor{d}
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.o.HTTPURL+"/v1/release", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("rlsclient: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.o.HTTPClient.Do(req)
	if err != nil {
		return fmt.Errorf("rlsclient: release: %w", err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("rlsclient: release: %s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	var out releaseResponse
	if err := json.Unmarshal(msg, &out); err != nil {
		return fmt.Errorf("rlsclient: release: %w", err)
	}
	if !out.Released {
		return fmt.Errorf("%w (server: %s)", floodgate.ErrLeaseNotHeld, out.Note)
	}
	return nil
}
