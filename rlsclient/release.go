package rlsclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// ErrNoHTTP is returned by Release when Options.HTTPURL is empty.
var ErrNoHTTP = errors.New("rlsclient: Release needs Options.HTTPURL, the server's JSON API (RLS has no release call)")

type entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

type descriptor struct {
	Entries []entry `json:"entries"`
}

type settleRequest struct {
	Domain      string       `json:"domain"`
	Descriptors []descriptor `json:"descriptors"`
	Hits        int64        `json:"hits"`
}

// Release gives back the n units an allowed request for key holds under
// concurrency rules, when the request ends, through the server's JSON API
// (POST /v1/release): Envoy's RLS protocol has no release, so concurrency
// rules work through the server only for clients that call it. n must be
// the cost the request was allowed with.
func (c *Client) Release(ctx context.Context, key string, n int64) error {
	if c.o.HTTPURL == "" {
		return ErrNoHTTP
	}
	ctx, cancel := context.WithTimeout(ctx, c.o.Timeout)
	defer cancel()
	in := settleRequest{Domain: c.o.Domain, Hits: n}
	d := descriptor{}
	for _, e := range c.describe(key) {
		d.Entries = append(d.Entries, entry{e.Key, e.Value})
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
	return nil
}
