package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// overrideResult describes an override flood: RLS calls that each carry a
// limit override of a value never sent before, and victims at their limit
// asked again after every tenth of the flood.
type overrideResult struct {
	Target          string  `json:"target"`
	Overrides       int     `json:"overrides_sent"`
	Errors          int64   `json:"errors"`
	FirstError      string  `json:"first_error,omitempty"`
	Seconds         float64 `json:"seconds"`
	PerSecond       float64 `json:"overrides_per_s"`
	SlowestTenthS   float64 `json:"slowest_tenth_s"`
	FastestTenthS   float64 `json:"fastest_tenth_s"`
	Victims         int     `json:"victims"`
	VictimChecks    int     `json:"victim_checks"`
	VictimsAdmitted int     `json:"victims_admitted"`
}

// overrideFlood puts victims (client=victim-N, decided by the server's
// rules) at their limit, then sends n RLS calls from workers, each with
// client=attacker-N and an override of 10+N requests per minute, and asks
// every victim again after each tenth.
func overrideFlood(target, domain string, n, workers, victims, victimLimit int) overrideResult {
	res := overrideResult{Target: target, Victims: victims}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		res.FirstError = err.Error()
		return res
	}
	defer conn.Close()
	c := rlsv3.NewRateLimitServiceClient(conn)
	var errs atomic.Int64
	var firstErr sync.Once
	call := func(value string, limit *rlsv3.RateLimitResponse_RateLimit) rlsv3.RateLimitResponse_Code {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		d := &commonv3.RateLimitDescriptor{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "client", Value: value}}}
		if limit != nil {
			d.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: limit.RequestsPerUnit, Unit: typev3.RateLimitUnit(limit.Unit)}
		}
		resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*commonv3.RateLimitDescriptor{d}})
		if err != nil {
			errs.Add(1)
			firstErr.Do(func() { res.FirstError = err.Error() })
			return rlsv3.RateLimitResponse_UNKNOWN
		}
		return resp.OverallCode
	}
	for v := range victims {
		for range victimLimit {
			call(fmt.Sprintf("victim-%d", v), nil)
		}
	}
	checkVictims := func() {
		for v := range victims {
			res.VictimChecks++
			if call(fmt.Sprintf("victim-%d", v), nil) == rlsv3.RateLimitResponse_OK {
				res.VictimsAdmitted++
			}
		}
	}
	checkVictims()
	begin := time.Now()
	var next atomic.Int64
	tenth := max(1, n/10)
	for part := 0; part < n; part += tenth {
		t0 := time.Now()
		end := min(n, part+tenth)
		next.Store(int64(part))
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := int(next.Add(1) - 1); i < end; i = int(next.Add(1) - 1) {
					call(fmt.Sprintf("attacker-%d", i), &rlsv3.RateLimitResponse_RateLimit{
						RequestsPerUnit: uint32(10 + i), Unit: rlsv3.RateLimitResponse_RateLimit_MINUTE})
				}
			}()
		}
		wg.Wait()
		d := time.Since(t0).Seconds()
		if part == 0 || d > res.SlowestTenthS {
			res.SlowestTenthS = d
		}
		if part == 0 || d < res.FastestTenthS {
			res.FastestTenthS = d
		}
		res.Overrides = end
		checkVictims()
	}
	res.Seconds = time.Since(begin).Seconds()
	res.PerSecond = float64(res.Overrides) / res.Seconds
	res.Errors = errs.Load()
	return res
}

// releaseStep is one request of the foreign-release attack and what the
// server answered.
type releaseStep struct {
	Who    string `json:"who"`
	What   string `json:"what"`
	Status int    `json:"status"`
	Answer string `json:"answer"`
	Want   string `json:"want"`
	OK     bool   `json:"ok"`
}

// releaseResult is the foreign-release attack's report.
type releaseResult struct {
	Target string        `json:"target"`
	Steps  []releaseStep `json:"steps"`
	Pass   bool          `json:"pass"`
}

// foreignRelease runs the foreign-release attack against the JSON API at
// base: a holder takes the one slot of a concurrency rule (descriptor
// job=VALUE), and an attacker tries to free it with /v1/release, with no
// lease and with a made-up one, before the holder releases its own lease
// twice; exactly one slot must come free.
func foreignRelease(base, domain, job string) releaseResult {
	res := releaseResult{Target: base, Pass: true}
	hc := &http.Client{Timeout: 5 * time.Second}
	body := func(lease string) []byte {
		m := map[string]any{"domain": domain, "descriptors": []any{
			map[string]any{"entries": []any{map[string]string{"key": "job", "value": job}}}}}
		if lease != "" {
			m["lease"] = lease
		}
		b, _ := json.Marshal(m)
		return b
	}
	post := func(who, what, path, lease, want string, ok func(int, map[string]any) bool) map[string]any {
		st := releaseStep{Who: who, What: what, Want: want}
		resp, err := hc.Post(base+path, "application/json", bytes.NewReader(body(lease)))
		var m map[string]any
		if err != nil {
			st.Answer = err.Error()
		} else {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			st.Status = resp.StatusCode
			st.Answer = string(bytes.TrimSpace(b))
			if len(st.Answer) > 200 {
				st.Answer = st.Answer[:200] + "..."
			}
			json.Unmarshal(b, &m)
			st.OK = ok(resp.StatusCode, m)
		}
		res.Pass = res.Pass && st.OK
		res.Steps = append(res.Steps, st)
		return m
	}
	allowed := func(want bool) func(int, map[string]any) bool {
		return func(code int, m map[string]any) bool { return code == 200 && m["allowed"] == want }
	}
	released := func(want bool) func(int, map[string]any) bool {
		return func(code int, m map[string]any) bool { return code == 200 && m["released"] == want }
	}
	held := post("holder", "check", "/v1/check", "", "allowed, with a lease", allowed(true))
	lease, _ := held["lease"].(string)
	post("attacker", "check", "/v1/check", "", "rejected (the slot is held)", allowed(false))
	post("attacker", "release without a lease", "/v1/release", "", "400", func(code int, _ map[string]any) bool { return code == 400 })
	post("attacker", "release with a made-up lease", "/v1/release", "0123456789abcdef01234567", "released:false",
		func(code int, m map[string]any) bool { return code == 400 || released(false)(code, m) })
	post("attacker", "check", "/v1/check", "", "rejected (the slot is still held)", allowed(false))
	post("holder", "release with its lease", "/v1/release", lease, "released:true", released(true))
	post("holder", "release with its lease again", "/v1/release", lease, "released:false", released(false))
	post("attacker", "check", "/v1/check", "", "allowed (the one freed slot)", allowed(true))
	post("attacker", "check", "/v1/check", "", "rejected (one release freed one slot)", allowed(false))
	return res
}
