package envoyratelimit

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// answer is one response flattened to field path -> value, so that two
// servers' answers compare field by field.
type answer map[string]string

const absent = "<absent>"

// grpcAnswer flattens a ShouldRateLimit response or its error.
func grpcAnswer(resp *pb.RateLimitResponse, err error) answer {
	a := answer{}
	if err != nil {
		a["grpc_code"] = status.Code(err).String()
		return a
	}
	flatten(a, resp)
	return a
}

func flatten(a answer, resp *pb.RateLimitResponse) {
	a["overall_code"] = resp.GetOverallCode().String()
	a["statuses"] = strconv.Itoa(len(resp.GetStatuses()))
	for i, s := range resp.GetStatuses() {
		p := fmt.Sprintf("status[%d].", i)
		a[p+"code"] = s.GetCode().String()
		if l := s.GetCurrentLimit(); l == nil {
			a[p+"current_limit"] = "nil"
		} else {
			a[p+"current_limit"] = fmt.Sprintf("%d/%s", l.GetRequestsPerUnit(), l.GetUnit())
			a[p+"current_limit.name"] = strconv.Quote(l.GetName())
		}
		a[p+"limit_remaining"] = strconv.FormatUint(uint64(s.GetLimitRemaining()), 10)
		if d := s.GetDurationUntilReset(); d == nil {
			a[p+"duration_until_reset"] = "nil"
		} else {
			a[p+"duration_until_reset"] = strconv.FormatFloat(d.AsDuration().Seconds(), 'f', 3, 64)
		}
	}
	for _, h := range resp.GetResponseHeadersToAdd() {
		a["response_header["+strings.ToLower(h.GetKey())+"]"] = h.GetValue()
	}
	for _, h := range resp.GetRequestHeadersToAdd() {
		a["request_header["+strings.ToLower(h.GetKey())+"]"] = h.GetValue()
	}
	if md := resp.GetDynamicMetadata(); md != nil {
		// encoding/json writes it the same in every build (protojson's
		// spacing varies), so recorded answers compare.
		b, err := json.Marshal(md.AsMap())
		if err != nil {
			b = []byte(err.Error())
		}
		a["dynamic_metadata"] = string(b)
	}
	if len(resp.GetRawBody()) > 0 {
		a["raw_body"] = string(resp.GetRawBody())
	}
}

// jsonAnswer flattens an answer of POST /json: its status, and its body
// as a response when it is one.
func jsonAnswer(code int, body []byte) answer {
	a := answer{"http_status": strconv.Itoa(code)}
	var resp pb.RateLimitResponse
	if (code == http.StatusOK || code == http.StatusTooManyRequests) &&
		(protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(body, &resp) == nil {
		flatten(a, &resp)
		return a
	}
	a["body"] = strings.TrimSpace(string(body))
	return a
}

// close reports whether two values of field agree: exactly, or within a
// second for a duration until reset or a reset header.
func closeEnough(field, x, y string) bool {
	if x == y {
		return true
	}
	if strings.HasSuffix(field, "duration_until_reset") || strings.Contains(field, "reset]") {
		fx, ex := strconv.ParseFloat(x, 64)
		fy, ey := strconv.ParseFloat(y, 64)
		return ex == nil && ey == nil && math.Abs(fx-fy) <= 1
	}
	return false
}

// mismatch is one field on which Floodgate's answer differs from the
// reference's.
type mismatch struct {
	set, kind, scenario, step, transport, field string
	request                                     string
	ref, got                                    string
	category                                    string
}

var (
	indexRE  = regexp.MustCompile(`\[\d+\]`)
	headerRE = regexp.MustCompile(`_header\[.*\]`)
)

// category is the class of a differing field: its path without status
// indexes and header names (the same class over gRPC and /json).
func category(field string) string {
	return headerRE.ReplaceAllString(indexRE.ReplaceAllString(field, ""), "_headers")
}

// decisionFields are the fields that carry a decision: a request whose
// answers differ in one of them was decided differently.
var decisionFields = map[string]bool{"grpc_code": true, "overall_code": true, "status.code": true, "http_status": true, "statuses": true, "start": true}

func diff(ref, got answer) [][3]string {
	keys := map[string]bool{}
	for k := range ref {
		keys[k] = true
	}
	for k := range got {
		keys[k] = true
	}
	var out [][3]string
	for k := range keys {
		r, ok1 := ref[k]
		g, ok2 := got[k]
		if !ok1 {
			r = absent
		}
		if !ok2 {
			g = absent
		}
		if !closeEnough(k, r, g) {
			out = append(out, [3]string{k, r, g})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}

func send(ctx context.Context, r *rls, transport string, st step) answer {
	if st.post != nil {
		return postJSONAs(ctx, r, []byte(st.post.body), st.post.contentType)
	}
	req := st.req
	if transport == "grpc" {
		return grpcAnswer(r.client.ShouldRateLimit(ctx, req))
	}
	body, err := protojson.Marshal(req)
	if err != nil {
		return answer{"marshal_error": err.Error()}
	}
	return postJSON(ctx, r, body)
}

func postJSON(ctx context.Context, r *rls, body []byte) answer {
	return postJSONAs(ctx, r, body, "application/json")
}

// postJSONAs posts body to /json with the given Content-Type ("" for none).
func postJSONAs(ctx context.Context, r *rls, body []byte, contentType string) answer {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, r.httpURL+"/json", bytes.NewReader(body))
	if err != nil {
		return answer{"request_error": err.Error()}
	}
	if contentType != "" {
		hreq.Header.Set("Content-Type", contentType)
	}
	resp, err := httpClient.Do(hreq)
	if err != nil {
		return answer{"transport_error": err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return jsonAnswer(resp.StatusCode, b)
}

// window is the index of the unit-long window now falls in, as the
// reference aligns windows (to the Unix epoch, in UTC).
func window(unit int64) int64 {
	if unit == 0 {
		return 0
	}
	return time.Now().Unix() / unit
}

// awayFromBoundary waits, if less than margin is left of the current
// unit-long window, until the next window starts, so that what follows
// has at least margin (or the whole window) before a boundary. It waits
// for alignment only; nothing is asserted about time.
func awayFromBoundary(unit int64, margin time.Duration) {
	if unit == 0 {
		return
	}
	u := time.Duration(unit) * time.Second
	now := time.Now()
	left := u - time.Duration(now.UnixNano()%int64(u))
	if left < margin {
		time.Sleep(left + 5*time.Millisecond)
	}
}

// referee gives the reference's answer to step i of a run, sent at time
// sent: a live server's, or a recorded one.
type referee func(ctx context.Context, i int, st step, transport string, sent time.Time) answer

// liveReferee asks the reference server.
func liveReferee(ref *rls) referee {
	return func(ctx context.Context, _ int, st step, transport string, _ time.Time) answer {
		return send(ctx, ref, transport, st)
	}
}

// runScenario sends the scenario's requests to the reference and to
// Floodgate in turn, from empty counters on both, and returns where the
// answers differ, with the reference's answers and when each was asked
// (for a recording). A run starts at least 2 s before a boundary of the
// scenario's shortest window (a repeated run of a one-second window at the
// start of a second), and a run that crosses one anyway is run again from
// empty counters (at most eight times), so both servers see every request
// of a run in the same window.
func runScenario(t testing.TB, set string, sc scenario, transport string, ask referee, flush func(), fg *rls) ([]mismatch, []answer, []time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []mismatch
	var answers []answer
	var times []time.Time
	for attempt := 0; attempt < 8; attempt++ {
		switch {
		case sc.unitSeconds > 1:
			awayFromBoundary(sc.unitSeconds, 2*time.Second)
		case sc.unitSeconds == 1 && attempt > 0:
			awayFromBoundary(1, time.Second) // a whole second for the run
		}
		flush()
		out, answers, times = out[:0], answers[:0], times[:0]
		w := window(sc.unitSeconds)
		for i, st := range sc.steps {
			sent := time.Now()
			ra := ask(ctx, i, st, transport, sent)
			ga := send(ctx, fg, transport, st)
			answers, times = append(answers, ra), append(times, sent)
			for _, d := range diff(ra, ga) {
				out = append(out, mismatch{
					set: set, kind: sc.kind, scenario: sc.name, step: st.label, transport: transport, field: d[0],
					request: st.String(), ref: d[1], got: d[2],
					category: category(d[0]),
				})
			}
		}
		if window(sc.unitSeconds) == w {
			return out, answers, times
		}
	}
	t.Errorf("%s: %s: eight runs crossed a window boundary", set, sc.name)
	return out, answers, times
}

// compareConfigDump compares the two servers' /rlconfig (as sorted lines:
// the reference prints them in map order).
func compareConfigDump(ctx context.Context, set string, ref, fg string) []mismatch {
	if ref == fg {
		return nil
	}
	return []mismatch{{set: set, kind: "rlconfig", scenario: "GET /rlconfig", transport: "debug", field: "rlconfig",
		ref: strconv.Quote(ref), got: strconv.Quote(fg), category: "rlconfig"}}
}

// configDump is a server's GET /rlconfig with its lines sorted.
func configDump(ctx context.Context, r *rls) string {
	if r.debugURL == "" {
		return ""
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.debugURL+"/rlconfig", nil)
	resp, err := httpClient.Do(req)
	if err != nil {
		return "error: " + err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	lines := strings.SplitAfter(string(b), "\n")
	sort.Strings(lines)
	return strconv.Itoa(resp.StatusCode) + "\n" + strings.Join(lines, "")
}

// knownDifference is a difference that remains on purpose or is not
// fixed yet, with the reason: the mismatches in category (every category
// if empty) where "config / scenario / request" contains where (all of
// them if empty).
type knownDifference struct {
	category, where, reason string
}

func (k knownDifference) covers(m mismatch) bool {
	return (k.category == "" || k.category == m.category) && strings.Contains(m.set+" / "+m.scenario+" / "+m.request, k.where)
}

func (k knownDifference) String() string {
	if k.where == "" {
		return k.category
	}
	return fmt.Sprintf("%s in %q", cmp.Or(k.category, "every field"), k.where)
}

// checkKnown fails the test for every mismatch no known difference
// covers, and logs every known difference that no longer occurs; it logs
// the count of mismatches per known difference and per category, and
// writes every mismatch to the Markdown file INTEROP_FINDINGS names, if
// set.
func checkKnown(t *testing.T, mode string, compared int, ms []mismatch, known []knownDifference) {
	t.Helper()
	decided := map[string]bool{}
	for _, m := range ms {
		if decisionFields[m.category] {
			decided[m.set+"\x00"+m.scenario+"\x00"+m.step+"\x00"+m.transport] = true
		}
	}
	t.Logf("%s: %d answers compared (gRPC and /json), %d decided differently; %d fields differ",
		mode, compared, len(decided), len(ms))
	byKnown := make([][]mismatch, len(known))
	unknown := map[string][]mismatch{}
	for _, m := range ms {
		i := slices.IndexFunc(known, func(k knownDifference) bool { return k.covers(m) })
		if i < 0 {
			unknown[m.category] = append(unknown[m.category], m)
			continue
		}
		byKnown[i] = append(byKnown[i], m)
	}
	for i, k := range known {
		if len(byKnown[i]) == 0 {
			t.Logf("%s: the known difference %s no longer occurs: it can leave the list", mode, k)
			continue
		}
		kinds := map[string]int{}
		for _, m := range byKnown[i] {
			kinds[m.kind]++
		}
		t.Logf("known: %s: %d fields (by scenario: %v): %s", k, len(byKnown[i]), kinds, k.reason)
	}
	for _, c := range slices.Sorted(maps.Keys(unknown)) {
		m := unknown[c][0]
		t.Errorf("%s: %d mismatches in %q, e.g. %s / %s / %s: request %s: reference %s, floodgate %s",
			mode, len(unknown[c]), c, m.set, m.scenario, m.step, m.request, m.ref, m.got)
	}
	writeFindings(t, mode, ms)
}

func writeFindings(t *testing.T, mode string, ms []mismatch) {
	path := os.Getenv("INTEROP_FINDINGS")
	if path == "" || len(ms) == 0 {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Errorf("findings file: %v", err)
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "\n### %s: %d mismatching fields\n\n| config | scenario / step | transport | field | request | reference | floodgate |\n|---|---|---|---|---|---|---|\n", mode, len(ms))
	for _, m := range ms {
		fmt.Fprintf(f, "| %s | %s / %s | %s | %s | `%s` | %s | %s |\n", m.set, m.scenario, m.step, m.transport, m.field,
			strings.ReplaceAll(m.request, "|", "\\|"), m.ref, m.got)
	}
}

// compact is a request in one line of JSON.
func compact(req *pb.RateLimitRequest) string {
	b, err := protojson.Marshal(req)
	if err != nil {
		return err.Error()
	}
	return string(b)
}
