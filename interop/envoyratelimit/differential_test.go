package envoyratelimit

import (
	"context"
	"testing"
	"time"
)

// malformedJSON are bodies of POST /json that are not a RateLimitRequest.
var malformedJSON = []string{``, `{`, `[]`, `{"domain": 5}`, `{"domain": "d", "descriptors": [{"entries": [{"key": 1}]}]}`, `{"unknown_field": true}`}

// compareOnSets starts, for every config set, the reference (with env
// added to its environment) and one Floodgate (built by start from the
// runtime layout and its own Redis) and
// compares their answers to every generated request over gRPC and over
// POST /json. It returns the mismatches and the count of answers compared.
func compareOnSets(t *testing.T, sets []configSet, env map[string]string, start func(t *testing.T, l runtimeLayout, redisAddr string) (*rls, error)) ([]mismatch, int) {
	var all []mismatch
	compared := 0
	for _, set := range sets {
		t.Run(set.name, func(t *testing.T) {
			layout := writeRuntime(t, set)
			refRedis, fgRedis := startRedis(t), startRedis(t)
			ref := side{startReference(t, referenceEnv(t, layout, refRedis.Addr(), env)), refRedis}
			fgSrv, err := start(t, layout, fgRedis.Addr())
			if err != nil {
				all = append(all, mismatch{set: set.name, kind: "start", scenario: "start", field: "start",
					ref: "loads", got: err.Error(), category: "start"})
				return
			}
			fg := side{fgSrv, fgRedis}
			for _, f := range set.files {
				for _, sc := range scenarios(t, f) {
					for _, transport := range []string{"grpc", "json"} {
						all = append(all, runScenario(t, set.name, sc, transport, ref, fg)...)
						compared += len(sc.steps)
					}
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			// Bodies that are not a request, and a request sent without a
			// Content-Type (curl -d sends form encoding's).
			type post struct{ kind, body, contentType string }
			var posts []post
			for _, body := range malformedJSON {
				posts = append(posts, post{"malformed body", body, "application/json"})
			}
			posts = append(posts,
				post{"no content type", `{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`, ""},
				post{"form content type", `{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`, "application/x-www-form-urlencoded"})
			for _, p := range posts {
				ra := postJSONAs(ctx, ref.srv, []byte(p.body), p.contentType)
				ga := postJSONAs(ctx, fg.srv, []byte(p.body), p.contentType)
				compared++
				for _, d := range diff(ra, ga) {
					all = append(all, mismatch{set: set.name, kind: p.kind, scenario: p.kind, step: p.body, transport: "json",
						field: d[0], request: p.body + " (Content-Type: " + p.contentType + ")", ref: d[1], got: d[2], category: category(d[0])})
				}
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
	{"status.current_limit", "", "a value with '*' inside it (bar*b) is a wildcard in own mode, a literal value in the reference, which only matches a trailing '*'; an empty entry key is an error"},
	{"status.current_limit.name", "", "follows status.current_limit: a value with '*' inside it is a wildcard in own mode"},
	{"statuses", "", "an empty entry key, and a POST /json body not sent as application/json, are refused"},
	{"grpc_code", "", "an empty entry key is INVALID_ARGUMENT (the reference: OK, no limit); no descriptors and an empty domain are INVALID_ARGUMENT (the reference: Unknown)"},
	{"body", "", "POST /json with an empty entry key answers 400, and a body not sent as application/json 415 (the reference: 200 with the answer)"},
}
