package loadgen

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// plainCaller sends GET requests to a URL with the call's key in a header,
// as an API client behind a gateway or proxy does: 2xx is allowed, 429 is
// over limit, anything else is an error. Each client keeps its own
// keep-alive connection.
type plainCaller struct {
	url    string
	header string
	client *http.Client
	values []string
}

func newPlainCaller(c *Config, url string) *plainCaller {
	tr := &http.Transport{
		MaxIdleConns:        c.Concurrency,
		MaxIdleConnsPerHost: c.Concurrency,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	p := &plainCaller{url: url, header: http.CanonicalHeaderKey(c.KeyHeader), client: &http.Client{Transport: tr}}
	p.values = make([]string, c.Keys)
	for k := range c.Keys {
		p.values[k] = "key-" + strconv.Itoa(k)
	}
	return p
}

func (p *plainCaller) call(ctx context.Context, worker, key int) (Outcome, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url, nil)
	if err != nil {
		return Failed, err
	}
	req.Header[p.header] = []string{p.values[key]}
	resp, err := p.client.Do(req)
	if err != nil {
		return Failed, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)); err != nil {
		return Failed, err
	}
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		return OverLimit, nil
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return Allowed, nil
	default:
		return Failed, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
}

func (p *plainCaller) close() error {
	p.client.CloseIdleConnections()
	return nil
}
