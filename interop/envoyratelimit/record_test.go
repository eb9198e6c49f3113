package envoyratelimit

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/envoycompat"
)

// A reference newer than the version go.mod pins cannot run in CI (the
// module proxy does not serve it), so what it answers is recorded instead:
// scripts/compare-envoy-ratelimit-current runs these tests against its
// sources with INTEROP_RECORD set, and the answers it gives on the config
// sets that changed since the pinned version (the sets, its answers to
// each generated request over gRPC and POST /json, its /rlconfig) and
// which of its files load are written to testdata. The suite replays them
// against compatibility mode: TestCompatModeAgainstRecordedReference.

// recordDir is where the recording and the reference's config files are
// kept, with SOURCE.md naming the reference's commit.
const recordDir = "testdata/envoyproxy-ratelimit"

// recording is the current reference's answers.
type recording struct {
	// Reference names the reference recorded (its commit).
	Reference string `json:"reference"`
	// Loads maps each file (or directory, ending in /) of the reference's
	// configs to "" when the reference loads it, else its error.
	Loads map[string]string `json:"loads"`
	// Sets are the config sets recorded: name -> file origins.
	Sets map[string][]string `json:"sets"`
	// Dumps are the reference's /rlconfig of each set, lines sorted.
	Dumps map[string]string `json:"rlconfig"`
	Runs  []recordedRun     `json:"runs"`
}

// recordedRun is one scenario sent to the reference over one transport,
// from empty counters, in one window.
type recordedRun struct {
	Env       map[string]string `json:"env,omitempty"`
	Set       string            `json:"set"`
	Kind      string            `json:"kind"`
	Scenario  string            `json:"scenario"`
	Transport string            `json:"transport"`
	Unit      int64             `json:"unit,omitempty"`
	Steps     []recordedStep    `json:"steps"`
}

type recordedStep struct {
	Label       string          `json:"label"`
	Request     json.RawMessage `json:"request,omitempty"`
	Body        *string         `json:"body,omitempty"`
	ContentType string          `json:"content_type,omitempty"`
	Answer      answer          `json:"answer"`
	// Resets are the answer's fields that count down to a window's end,
	// with the window in seconds: replayed, they are that window's
	// remaining seconds at the time of the replay.
	Resets map[string]int64 `json:"resets,omitempty"`
}

// recorder collects a recording when INTEROP_RECORD names a directory
// (and INTEROP_RECORD_SINCE the pinned reference's module directory, to
// tell the sets that changed); nil otherwise.
var recorder *recorderState

type recorderState struct {
	dir, since string
	mu         sync.Mutex
	rec        recording
	files      map[string]string // origin -> text, of every file recorded
}

func init() {
	if dir := os.Getenv("INTEROP_RECORD"); dir != "" {
		recorder = &recorderState{dir: dir, since: os.Getenv("INTEROP_RECORD_SINCE"), files: map[string]string{},
			rec: recording{Reference: os.Getenv("INTEROP_RECORD_REFERENCE"), Loads: map[string]string{}, Sets: map[string][]string{}, Dumps: map[string]string{}}}
	}
}

// setRecorder records the runs of one set under one environment; nil
// records nothing.
type setRecorder struct {
	r   *recorderState
	set configSet
	env map[string]string
}

// changed reports whether a file differs from the pinned reference's.
func (r *recorderState) changed(f configFile) bool {
	if r.since == "" {
		return true
	}
	if strings.HasPrefix(f.origin, "README.md#") {
		b, err := os.ReadFile(filepath.Join(r.since, "README.md"))
		return err != nil || !strings.Contains(string(b), f.text)
	}
	b, err := os.ReadFile(filepath.Join(r.since, f.origin))
	return err != nil || string(b) != f.text
}

// forSet starts recording a set when it changed since the pinned version.
func (r *recorderState) forSet(t testing.TB, set configSet, env map[string]string) *setRecorder {
	if r == nil || !slices.ContainsFunc(set.files, r.changed) {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var origins []string
	for _, f := range set.files {
		origins = append(origins, f.origin)
		r.files[f.origin] = f.text
	}
	r.rec.Sets[set.name] = origins
	return &setRecorder{r: r, set: set, env: env}
}

func (s *setRecorder) add(sc scenario, transport string, answers []answer, times []time.Time) {
	if s == nil {
		return
	}
	run := recordedRun{Env: s.env, Set: s.set.name, Kind: sc.kind, Scenario: sc.name, Transport: transport, Unit: sc.unitSeconds}
	for i, st := range sc.steps {
		rs := recordedStep{Label: st.label, Answer: answers[i], Resets: resets(answers[i], times[i])}
		if st.post != nil {
			rs.Body, rs.ContentType = &st.post.body, st.post.contentType
		} else {
			b, err := protojson.Marshal(st.req)
			if err != nil {
				panic(err)
			}
			rs.Request = b
		}
		run.Steps = append(run.Steps, rs)
	}
	s.r.mu.Lock()
	s.r.rec.Runs = append(s.r.rec.Runs, run)
	s.r.mu.Unlock()
}

func (s *setRecorder) dump(d string) {
	if s == nil || len(s.env) > 0 {
		return
	}
	s.r.mu.Lock()
	s.r.rec.Dumps[s.set.name] = d
	s.r.mu.Unlock()
}

// recordLoad records whether the reference loads a file or directory.
func (r *recorderState) recordLoad(name string, files []configFile, err error) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rec.Loads[name] = ""
	if err != nil {
		r.rec.Loads[name] = err.Error()
	}
	for _, f := range files {
		r.files[f.origin] = f.text
	}
}

var limitRE = regexp.MustCompile(`^\d+/([A-Z]+)$`)

var unitNames = map[string]int64{"SECOND": 1, "MINUTE": 60, "HOUR": 3600, "DAY": 86400, "WEEK": 7 * 86400, "MONTH": 30 * 86400, "YEAR": 365 * 86400}

// resets finds the fields of an answer given at sent that count down to
// the end of a window, and the window: a status's duration_until_reset,
// by its limit's unit; a reset header, by the unit of a status whose
// window ends that many seconds after sent (within a second).
func resets(a answer, sent time.Time) map[string]int64 {
	out := map[string]int64{}
	var units []int64
	for k, v := range a {
		if m := limitRE.FindStringSubmatch(v); m != nil && strings.HasSuffix(k, ".current_limit") {
			u := unitNames[m[1]]
			units = append(units, u)
			if _, ok := a[strings.TrimSuffix(k, "current_limit")+"duration_until_reset"]; ok {
				out[strings.TrimSuffix(k, "current_limit")+"duration_until_reset"] = u
			}
		}
	}
	for k, v := range a {
		if !strings.Contains(k, "reset]") {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			continue
		}
		for _, u := range units {
			if d := n - (u - sent.Unix()%u); d >= -1 && d <= 1 {
				out[k] = u
				break
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// resolve is a recorded answer as it would be given now: each reset field
// the seconds left in its window.
func (s recordedStep) resolve(now time.Time) answer {
	a := maps.Clone(s.Answer)
	for k, u := range s.Resets {
		left := u - now.Unix()%u
		if strings.HasSuffix(k, "duration_until_reset") {
			a[k] = strconv.FormatFloat(float64(left), 'f', 3, 64)
		} else {
			a[k] = strconv.FormatInt(left, 10)
		}
	}
	return a
}

// originFile is where a config file of the reference is kept in recordDir:
// its path in the reference's tree, a README block as README.md.yamlN.yaml.
func originFile(origin string) string {
	if strings.HasPrefix(origin, "README.md#") {
		return filepath.Join(recordDir, strings.Replace(origin, "#", ".", 1)+".yaml")
	}
	return filepath.Join(recordDir, origin)
}

// writeRecording writes the recording and the config files it names.
func (r *recorderState) write() error {
	if r == nil {
		return nil
	}
	sort.SliceStable(r.rec.Runs, func(i, j int) bool { return r.rec.Runs[i].Set < r.rec.Runs[j].Set })
	for origin, text := range r.files {
		p := filepath.Join(r.dir, strings.TrimPrefix(originFile(origin), recordDir+"/"))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			return err
		}
	}
	f, err := os.Create(filepath.Join(r.dir, "recording.json.gz"))
	if err != nil {
		return err
	}
	defer f.Close()
	z := gzip.NewWriter(f)
	enc := json.NewEncoder(z)
	enc.SetIndent("", " ")
	if err := enc.Encode(r.rec); err != nil {
		return err
	}
	return z.Close()
}

// loadRecording reads the recording the suite replays.
func loadRecording(t testing.TB) recording {
	t.Helper()
	if recorder != nil {
		t.Skip("this run records a reference, whose answers the live differential compares: replaying the last recording adds nothing")
	}
	f, err := os.Open(filepath.Join(recordDir, "recording.json.gz"))
	if err != nil {
		t.Fatalf("the recorded reference: %v (scripts/compare-envoy-ratelimit-current RECORD=1 writes it)", err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var rec recording
	if err := json.NewDecoder(z).Decode(&rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

func recordedFile(t testing.TB, origin string) configFile {
	t.Helper()
	b, err := os.ReadFile(originFile(origin))
	if err != nil {
		t.Fatal(err)
	}
	return configFile{origin: origin, text: string(b)}
}

// TestCompatModeLoadsAsRecordedReference loads every config file (and
// runtime directory) of the recorded reference with compatibility mode's
// loader: each loads exactly when the reference loaded it.
func TestCompatModeLoadsAsRecordedReference(t *testing.T) {
	rec := loadRecording(t)
	loads, refused := 0, 0
	for _, name := range slices.Sorted(maps.Keys(rec.Loads)) {
		var files []envoycompat.File
		if dir, ok := strings.CutSuffix(name, "/"); ok {
			matches, _ := filepath.Glob(filepath.Join(recordDir, dir, "*.yaml"))
			sort.Strings(matches)
			for _, m := range matches {
				rel, _ := filepath.Rel(recordDir, m)
				files = append(files, envoycompat.File{Name: "config." + filepath.Base(m), Text: []byte(recordedFile(t, rel).text)})
			}
		} else {
			files = []envoycompat.File{{Name: "config." + filepath.Base(name), Text: []byte(recordedFile(t, name).text)}}
		}
		_, err := envoycompat.LoadConfig(files, false, envoycompat.WildcardsAnywhere)
		refErr := rec.Loads[name]
		switch {
		case refErr == "" && err != nil:
			t.Errorf("%s: the reference (%s) loads it, compatibility mode refuses it: %v", name, rec.Reference, err)
		case refErr != "" && err == nil:
			t.Errorf("%s: the reference (%s) refuses it (%s), compatibility mode loads it", name, rec.Reference, refErr)
		case refErr == "":
			loads++
		default:
			refused++
		}
	}
	t.Logf("%d files and directories of %s: %d load in both, %d are refused by both", len(rec.Loads), rec.Reference, loads, refused)
}

// TestCompatModeAgainstRecordedReference replays the recorded reference's
// runs against compatibility mode, started as the reference was (the same
// config set and environment): every field of every answer, and
// /rlconfig, must be the reference's.
func TestCompatModeAgainstRecordedReference(t *testing.T) {
	t.Parallel() // beside the scripts' wait for a minute's end
	rec := loadRecording(t)
	type group struct {
		set  string
		env  map[string]string
		runs []recordedRun
	}
	var groups []*group
	for _, r := range rec.Runs {
		if n := len(groups); n > 0 && groups[n-1].set == r.Set && maps.Equal(groups[n-1].env, r.Env) {
			groups[n-1].runs = append(groups[n-1].runs, r)
			continue
		}
		groups = append(groups, &group{set: r.Set, env: r.Env, runs: []recordedRun{r}})
	}
	var all []mismatch
	compared := 0
	for _, g := range groups {
		t.Run(fmt.Sprintf("%s %v", g.set, g.env), func(t *testing.T) {
			set := configSet{name: g.set}
			for _, o := range rec.Sets[g.set] {
				set.files = append(set.files, recordedFile(t, o))
			}
			layout := writeRuntime(t, set)
			redis := startRedis(t)
			fg, err := startCompatWith(t, referenceEnv(t, layout, redis.Addr(), g.env), nil)
			if err != nil {
				all = append(all, mismatch{set: g.set, kind: "start", scenario: "start", field: "start", ref: "loads", got: err.Error(), category: "start"})
				return
			}
			for _, r := range g.runs {
				sc := scenario{kind: r.Kind, name: r.Scenario, unitSeconds: r.Unit}
				for _, s := range r.Steps {
					st := step{label: s.Label}
					if s.Body != nil {
						st.post = &rawPost{*s.Body, s.ContentType}
					} else {
						st.req = &pb.RateLimitRequest{}
						if err := protojson.Unmarshal(s.Request, st.req); err != nil {
							t.Fatal(err)
						}
					}
					sc.steps = append(sc.steps, st)
				}
				ask := func(_ context.Context, i int, _ step, _ string, sent time.Time) answer {
					return r.Steps[i].resolve(sent)
				}
				ms, _, _ := runScenario(t, g.set, sc, r.Transport, ask, func() { redis.FlushAll() }, fg)
				all = append(all, ms...)
				compared += len(sc.steps)
			}
			if d, ok := rec.Dumps[g.set]; ok && len(g.env) == 0 {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				all = append(all, compareConfigDump(ctx, g.set, d, configDump(ctx, fg))...)
				compared++
			}
		})
	}
	t.Logf("replayed %s: %d config sets, %d runs", rec.Reference, len(rec.Sets), len(rec.Runs))
	checkKnown(t, "compat mode against the recorded "+rec.Reference, compared, all, compatModeDifferences)
}
