package statuspage

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/metrics"
	"github.com/floodgate-dev/floodgate/internal/testkit/testtier"
	"github.com/floodgate-dev/floodgate/rules"
)

// chromium returns the path of Debian's chromium. The browser tests are
// the integration tier's: skipped by `go test ./...`; in the integration
// tier (scripts/test, which installs chromium) a missing chromium fails.
func chromium(t *testing.T) string {
	t.Helper()
	testtier.RequireIntegration(t, "drives headless Chromium")
	for _, name := range []string{"chromium", "/usr/bin/chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("chromium not installed (scripts/test installs it: apt-get install -y chromium)")
	return ""
}

// runChromium runs headless Chromium on url with the given extra flags and
// returns its standard output.
func runChromium(t *testing.T, bin, url string, extra ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--user-data-dir=" + t.TempDir(),
	}
	args = append(args, extra...)
	args = append(args, url)
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\nstderr:\n%s", args, err, lastLines(stderr.String(), 20))
	}
	return stdout.Bytes()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// pollingSource sends one more request through the engine before every
// snapshot, so each poll of the page sees new figures.
type pollingSource struct {
	*liveSource
	t testing.TB
}

func (p pollingSource) Snapshot() metrics.Snapshot {
	p.check(p.t, "acme", "10.0.0.1")
	return p.liveSource.Snapshot()
}

func (p pollingSource) Rules() []rules.RuleInfo { return p.liveSource.Rules() }

const xssClient = `<img src=x onerror="document.title='pwned'">`

// TestBrowserRendersLiveData loads the page in headless Chromium, lets it
// poll the feed for a few seconds of virtual time, and checks the DOM it
// built: the rules, per-rule figures, top rejected keys and store health are
// there, the figures come from a later poll than the first, and a key full
// of markup is shown as text.
func TestBrowserRendersLiveData(t *testing.T) {
	bin := chromium(t)
	src := newLiveSource(t)
	for range 9 {
		src.check(t, "acme", "10.0.0.1")
	}
	for range 7 {
		src.check(t, xssClient, "10.0.0.2")
	}
	src.rec.RuleReload(true)
	// Two requests of a domain no rule set has: the unmatched card.
	for range 2 {
		res, err := src.eng.Check(context.Background(), rules.Request{Domain: "shpo", Descriptors: []rules.Descriptor{{{Key: "client", Value: "x"}}}})
		if err != nil {
			t.Fatal(err)
		}
		src.rec.Observe(res, time.Microsecond)
	}
	srv := httptest.NewServer(Handler(pollingSource{src, t}))
	defer srv.Close()

	dom := string(runChromium(t, bin, srv.URL+"/", "--virtual-time-budget=5000", "--dump-dom"))

	if n := src.polls.Load(); n < 2 {
		t.Fatalf("the page fetched status.json %d times in 5 s of virtual time; want it polling", n)
	}
	m := regexp.MustCompile(`data-polls="(\d+)"`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("no data-polls attribute: the page never rendered a feed\n%s", dom)
	}
	if n, _ := strconv.Atoi(m[1]); n < 2 {
		t.Errorf("page rendered %d polls, want at least 2 (live updates)", n)
	}
	for _, want := range []string{
		"per-client", "audit-ip", // rule names
		"5 / 1m", "3 / 1h", // limits
		"bounded-log",                         // algorithm
		"shop|per-client|client=acme",         // top rejected key
		"store up",                            // health pill
		"memory",                              // store type
		`<span class="tag tag-shadow">shadow`, // shadow marker
		"p99 ≤ ",                              // recent latency bound
		`id="unmatched-sub" title="unknown domains: 2">unknown domains: 2<`, // requests no rule applied to
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("rendered page lacks %q", want)
		}
	}
	if strings.Contains(dom, "waiting for data") || strings.Contains(dom, "connecting…") {
		t.Errorf("page still shows its placeholders")
	}
	// The per-client rule allowed 5 (its limit) and rejected every later
	// request, including one per poll: its rejected total must exceed the
	// 6 rejections made before the page loaded.
	row := regexp.MustCompile(`(?s)<tr><td><strong>per-client</strong>.*?</tr>`).FindString(dom)
	cells := regexp.MustCompile(`<td class="num[^"]*">([^<]*)</td>`).FindAllStringSubmatch(row, -1)
	if len(cells) != 5 {
		t.Fatalf("per-client row has %d numeric cells: %s", len(cells), row)
	}
	allowed, _ := strconv.Atoi(strings.ReplaceAll(cells[3][1], ",", ""))
	rejected, _ := strconv.Atoi(strings.ReplaceAll(cells[4][1], ",", ""))
	if allowed != 10 || rejected <= 6 {
		t.Errorf("per-client row shows allowed %d rejected %d; want 10 (5 per client) and more than the 6 made before the page loaded", allowed, rejected)
	}
	// Markup in a key is text, not an element.
	if strings.Contains(dom, "<img") || !strings.Contains(dom, "<title>Floodgate status</title>") {
		t.Errorf("a rejected key's markup was rendered as HTML")
	}
	if !strings.Contains(dom, "&lt;img src\\=x onerror\\=") {
		t.Errorf("the markup-laden key is not shown as text")
	}
}

// TestBrowserScreenshot renders the page to a PNG. Set
// FLOODGATE_STATUS_SCREENSHOT to a path to keep it (docs/status-page.png is
// made that way from a real server; see docs/operations.md).
func TestBrowserScreenshot(t *testing.T) {
	bin := chromium(t)
	src := newLiveSource(t)
	for i := range 40 {
		src.check(t, fmt.Sprintf("client-%d", i%4), fmt.Sprintf("10.0.0.%d", i%3))
	}
	srv := httptest.NewServer(Handler(pollingSource{src, t}))
	defer srv.Close()
	out := filepath.Join(t.TempDir(), "status.png")
	if p := os.Getenv("FLOODGATE_STATUS_SCREENSHOT"); p != "" {
		out = p
	}
	runChromium(t, bin, srv.URL+"/", "--virtual-time-budget=3000", "--hide-scrollbars",
		"--window-size=1280,1000", "--screenshot="+out)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) || len(b) < 20_000 {
		t.Fatalf("screenshot is not a plausible PNG (%d bytes)", len(b))
	}
}

// pollingHistory is a pollingSource that also serves its recorder's
// history.
type pollingHistory struct{ pollingSource }

func (p pollingHistory) History() []metrics.Point { return p.rec.History() }

// TestBrowserShowsHistoryAtOpen opens the page after ten minutes of
// history (a recorder under a virtual clock, a point a second, with a
// burst of rejections nine minutes ago): the chart starts from the
// server's history, not empty, and spans the ten minutes. The unmatched
// card names domains as such ("domain shop: 3", not "shop 3"), is amber
// (not limited is not rejected), and shows its text whole.
func TestBrowserShowsHistoryAtOpen(t *testing.T) {
	bin := chromium(t)
	src := newLiveSource(t)
	var live atomic.Bool
	virtual := time.Now().Add(-10 * time.Minute)
	src.rec = metrics.New(metrics.WithClock(func() time.Time {
		if live.Load() {
			return time.Now()
		}
		return virtual
	}))
	src.rec.SetStore(metrics.StoreHealth{Type: "memory", Arrangement: "local", Up: true})
	for i := range 600 {
		virtual = virtual.Add(time.Second)
		switch {
		case i >= 60 && i < 80: // the burst: one client far over its 5 a minute
			for range 10 {
				src.check(t, "burst", "10.0.0.9")
			}
		case i%10 == 0:
			src.check(t, fmt.Sprintf("steady-%d", i), "10.0.0.8")
		}
		src.rec.RecordHistory()
	}
	live.Store(true)
	for _, c := range []struct {
		domain string
		n      int
	}{{"shop", 3}, {"shpo", 2}} { // no rule applies: unmatched in the rules' domain, and in an unknown one
		for range c.n {
			res, err := src.eng.Check(context.Background(), rules.Request{Domain: c.domain, Descriptors: []rules.Descriptor{{{Key: "nothing", Value: "x"}}}})
			if err != nil {
				t.Fatal(err)
			}
			src.rec.Observe(res, time.Microsecond)
		}
	}
	var rejected uint64
	for _, p := range src.rec.History() {
		rejected += uint64(p.Rejected)
	}
	srv := httptest.NewServer(Handler(pollingHistory{pollingSource{src, t}}))
	defer srv.Close()

	dom := string(runChromium(t, bin, srv.URL+"/", "--virtual-time-budget=3000", "--window-size=1280,1000", "--dump-dom"))

	attr := func(name string) string {
		m := regexp.MustCompile(name + `="([^"]*)"`).FindStringSubmatch(dom)
		if m == nil {
			t.Fatalf("no %s attribute: the page never drew its chart\n%s", name, dom)
		}
		return m[1]
	}
	if n, _ := strconv.Atoi(attr("data-history-points")); n < 600 {
		t.Errorf("the chart holds %d points on opening, want the server's 600 and the live ones", n)
	}
	if r, _ := strconv.ParseFloat(attr("data-history-rejected"), 64); r < float64(rejected) || rejected < 150 {
		t.Errorf("the chart holds %.0f rejections, want at least the history's %d (the burst)", r, rejected)
	}
	if !regexp.MustCompile(`id="chart-span">last 10m \d+s<`).MatchString(dom) {
		t.Errorf("the chart's span is not the ten minutes of history: %s", regexp.MustCompile(`id="chart-span">[^<]*<`).FindString(dom))
	}
	for _, want := range []string{
		`class="value warn" id="unmatched">5<`,
		`title="unknown domains: 2 · domain shop: 3">unknown domains: 2 · domain shop: 3<`,
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("rendered page lacks %q: %s", want, regexp.MustCompile(`(?s)<div class="card"><div class="label">unmatched.*?</div></div>`).FindString(dom))
		}
	}
	if cut := attr("data-unmatched-cut"); cut != "false" {
		t.Errorf("the unmatched card's text is cut off (data-unmatched-cut=%s)", cut)
	}
}
