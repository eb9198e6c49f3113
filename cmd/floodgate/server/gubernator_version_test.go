package server

import (
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/gubernator/gubernatorpb"
	"github.com/floodgate-dev/floodgate/distributed"
	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
)

// TestGubernatorVersion: gubernator.version picks the release whose
// answers the API gives (v2.21 by default, v2.13 on request; anything else
// stops the start with a line naming the key), and schedule_max_wait caps
// the waits max_wait books.
func TestGubernatorVersion(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"gubernator:\n  version: v2.14\n", "gubernator.version"},
		{"gubernator:\n  version: 2.13\n", "gubernator.version"},
		{"gubernator:\n  schedule_max_wait: -1s\n", "gubernator.schedule_max_wait"},
	} {
		if _, err := ParseConfig("f.yaml", []byte(c.yaml)); err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: %v, want one line naming %s", c.yaml, err, c.want)
		}
	}
	cfg, err := ParseConfig("f.yaml", []byte("gubernator:\n  version: v2.13\n  schedule_max_wait: 2s\n"))
	if err != nil || cfg.Gubernator.Version != "v2.13" || cfg.Gubernator.ScheduleMaxWait != 2*time.Second {
		t.Fatalf("version v2.13, schedule_max_wait 2s: %+v %v", cfg.Gubernator, err)
	}

	weeks := &gubernatorpb.RateLimitReq{Name: "v", UniqueKey: "w", Hits: 1, Limit: 5, Duration: 3, Behavior: gubernatorpb.Behavior_DURATION_IS_GREGORIAN}
	book := func(key string, hits int64) *gubernatorpb.RateLimitReq {
		return &gubernatorpb.RateLimitReq{Name: "v", UniqueKey: key, Hits: hits, Limit: 1, Duration: 60_000,
			Algorithm: gubernatorpb.Algorithm_LEAKY_BUCKET, MaxWait: 120_000}
	}
	for _, c := range []struct {
		version   string
		ceiling   time.Duration
		weeksErr  bool
		booked    gubernatorpb.Status
		retry     int64
		storeKind string
	}{
		{"", 0, false, gubernatorpb.Status_SCHEDULED, 60_000, ""},
		{"v2.21", time.Second, false, gubernatorpb.Status_OVER_LIMIT, 60_000, ""},
		{"v2.13", 0, true, gubernatorpb.Status_OVER_LIMIT, 0, ""}, // max_wait ignored
		{"", 0, false, gubernatorpb.Status_SCHEDULED, 60_000, "centralized"},
		{"", 0, false, gubernatorpb.Status_UNDER_LIMIT, 0, "delayed"}, // refused: an error
	} {
		cfg := testConfig()
		cfg.Gubernator.Version, cfg.Gubernator.ScheduleMaxWait = c.version, c.ceiling
		if c.storeKind != "" {
			cfg.Store = Store{Type: StoreRedis, Addrs: []string{redistest.Start(t).Addr()}, Prefix: "fgv"}
			cfg.Arrangement.Mode, cfg.Arrangement.Nodes = distributed.Arrangement(c.storeKind), 1
		}
		r := start(t, cfg)
		name := c.version + " " + c.ceiling.String() + " " + c.storeKind
		resp, err := guberCall(t, r, weeks, book("b", 1), book("b", 1))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := strings.Contains(resp[0].Error, "GregorianWeeks"); got != c.weeksErr {
			t.Errorf("%s: a calendar week: %v, want the weeks error %v", name, resp[0], c.weeksErr)
		}
		if c.storeKind == "delayed" {
			if !strings.Contains(resp[1].Error, "'max_wait' is not supported with arrangement.mode delayed") {
				t.Errorf("%s: max_wait: %v, want an error naming the field and the arrangement", name, resp[1])
			}
			continue
		}
		if resp[1].Error != "" || resp[1].Status != gubernatorpb.Status_UNDER_LIMIT ||
			resp[2].Error != "" || resp[2].Status != c.booked || resp[2].RetryAfter != c.retry {
			t.Errorf("%s: max_wait on a full and an empty bucket: %v %v, want UNDER_LIMIT then %v with retry_after %d", name, resp[1], resp[2], c.booked, c.retry)
		}
	}
}
