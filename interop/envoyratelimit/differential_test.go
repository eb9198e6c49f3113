package envoyratelimit

import (
	"context"
	"testing"
	"time"
)

// malformedJSON are bodies of POST /json that are not a RateLimitRequest.
var malformedJSON = []string{``, `{`, `[]`, `{"domain": 5}`, `{"domain": "d", "descriptors": [{"entries": [{"key": 1}]}]}`, `{"unknown_field": true}`}

// postScenario is the POST /json bodies that are not a request, and a
// request sent without a Content-Type or with form encoding's (curl -d).
func postScenario() scenario {
	sc := scenario{kind: "raw POST /json", name: "raw POST /json"}
	for _, body := range malformedJSON {
		sc.steps = append(sc.steps, step{label: "malformed body", post: &rawPost{body, "application/json"}})
	}
	req := `{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`
	sc.steps = append(sc.steps, step{label: "no content type", post: &rawPost{req, ""}},
		step{label: "form content type", post: &rawPost{req, "application/x-www-form-urlencoded"}})
	return sc
}

// compareOnSets starts, for every config set, the reference (with env
// added to its environment) and one Floodgate (built by start from the
// runtime layout and its own Redis) and compares their answers to every
// generated request over gRPC and over POST /json, to raw POST /json
// bodies and, when Floodgate has a debug listener, their /rlconfig. It
// returns the mismatches and the count of answers compared. With a
// recording under way (INTEROP_RECORD), the reference's answers on the
// sets that changed since the pinned version are recorded.
func compareOnSets(t *testing.T, sets []configSet, env map[string]string, start func(t *testing.T, l runtimeLayout, redisAddr string) (*rls, error)) ([]mismatch, int) {
	var all []mismatch
	compared := 0
	for _, set := range sets {
		t.Run(set.name, func(t *testing.T) {
			layout := writeRuntime(t, set)
			refRedis, fgRedis := startRedis(t), startRedis(t)
			ref := startReference(t, referenceEnv(t, layout, refRedis.Addr(), env))
			fg, err := start(t, layout, fgRedis.Addr())
			if err != nil {
				all = append(all, mismatch{set: set.name, kind: "start", scenario: "start", field: "start",
					ref: "loads", got: err.Error(), category: "start"})
				return
			}
			flush := func() { refRedis.FlushAll(); fgRedis.FlushAll() }
			rec := recorder.forSet(t, set, env)
			run := func(sc scenario, transport string) {
				ms, answers, times := runScenario(t, set.name, sc, transport, liveReferee(ref), flush, fg)
				all = append(all, ms...)
				compared += len(sc.steps)
				rec.add(sc, transport, answers, times)
			}
			for _, f := range set.files {
				for _, sc := range scenarios(t, f) {
					for _, transport := range []string{"grpc", "json"} {
						run(sc, transport)
					}
				}
			}
			run(postScenario(), "json")
			if fg.debugURL != "" {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				rd := configDump(ctx, ref)
				all = append(all, compareConfigDump(ctx, set.name, rd, configDump(ctx, fg))...)
				compared++
				rec.dump(rd)
			}
		})
	}
	return all, compared
}

// TestOwnModeAgainstReference compares Floodgate in its own mode with the
// reference on the reference's configs. The differences that remain are
// listed in ownModeDifferences with their reasons; any other fails.
func TestOwnModeAgainstReference(t *testing.T) {
	ms, n := compareOnSets(t, configSets(t), nil, func(t *testing.T, l runtimeLayout, redisAddr string) (*rls, error) {
		return startFloodgate(t, l.configDir(), redisAddr)
	})
	checkKnown(t, "own mode", n, ms, ownModeDifferences)
}

// ownModeDifferences are the differences Floodgate's own mode keeps on
// the reference's configs, each with its reason.
var ownModeDifferences = []knownDifference{
	{"status.duration_until_reset", "", "own mode's sliding window answers the time until the count falls, in fractions of a second; the reference counts whole seconds to the unit's calendar boundary"},
	{"status.limit_remaining", "", "own mode's sliding window, and rejected hits not counted (no false rejects)"},
	{"status.code", "", "rejected hits are not counted (no false rejects), and hits_addend 0 at exactly the limit is OVER_LIMIT (the reference: OK)"},
	{"overall_code", "", "follows status.code"},
	{"http_status", "", "POST /json answers 429 or 200 by overall_code, which differs as status.code does; an empty entry key is 400 and a body not sent as application/json is 415 (the reference: 200)"},
	{"status.current_limit", "", "a value with '*' inside it (bar*b) is a wildcard in own mode, a literal value in a reference before envoyproxy/ratelimit#1085; an empty entry key is an error"},
	{"status.current_limit.name", "", "follows status.current_limit: a value with '*' inside it is a wildcard in own mode and a current reference"},
	{"statuses", "", "an empty entry key, and a POST /json body not sent as application/json, are refused"},
	{"grpc_code", "", "an empty entry key is INVALID_ARGUMENT (the reference: OK, no limit); no descriptors and an empty domain are INVALID_ARGUMENT (the reference: Unknown)"},
	{"body", "", "POST /json with an empty entry key answers 400, and a body not sent as application/json 415 (the reference: 200 with the answer)"},
}
