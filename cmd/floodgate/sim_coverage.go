package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/floodgate-dev/floodgate/gateway"
	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/rules"
	"github.com/floodgate-dev/floodgate/rules/httprules"
)

// The gateway example's services: the loan service's paths and the catalog's.
var (
	coverageLoan    = []string{"/loan/borrow", "/loan/list", "/loan-bulk/list"}
	coverageCatalog = []string{"/catalog/search"}
)

// The rule written into the gateway: one prefix, /loan/. The limit is far
// above the traffic: what is measured is which requests are counted.
const coverageGatewayRules = `# The gateway's rule, as the gateway example writes it: the one prefix /loan/.
domain: gateway
rules:
  - name: loan-prefix
    match: {path: {prefix: /loan/}}
    count_by: global
    limit: 1000000000
    window: 1m
    algorithm: fixed-window
`

// The middle layer's rule: every request that reaches the loan service.
const coverageServiceRules = `domain: loan-service
rules:
  - name: loan-service
    match: {path: "*"}
    count_by: global
    limit: 1000000000
    window: 1m
    algorithm: fixed-window
`

// In setup B the gateway carries a rule for a prefix no path has, as the
// gateway example's gateway for B does: it forwards, and counts nothing.
const coverageNoneRules = `domain: gateway
rules:
  - name: none-prefix
    match: {path: {prefix: /none/}}
    count_by: global
    limit: 1000000000
    window: 1m
    algorithm: fixed-window
`

// coverageRow is one path-access pair.
type coverageRow struct {
	Path    string `json:"path"`
	Access  string `json:"access"`
	Gateway string `json:"gateway"`
	Middle  string `json:"middle_layer"`
}

// coverageReport is sim coverage's result.
type coverageReport struct {
	Rows    []coverageRow `json:"pairs"`
	Total   int           `json:"total"`
	Gateway int           `json:"gateway"`
	Middle  int           `json:"middle_layer"`
	None    int           `json:"outside"`
	// Check is what `floodgate check` reports for the gateway's rule and the
	// four routes.
	Check json.RawMessage `json:"check,omitempty"`
}

// countingChecker counts the checks in which a rule applied: the requests
// the limiter saw and counted.
type countingChecker struct {
	eng     *rules.Engine
	counted atomic.Int64
}

func (c *countingChecker) Check(ctx context.Context, req rules.Request) (rules.Result, error) {
	res, err := c.eng.Check(ctx, req)
	if err == nil && len(res.Statuses) > 0 {
		c.counted.Add(1)
	}
	return res, err
}

func (c *countingChecker) Release(ctx context.Context, req rules.Request, lease string) (bool, error) {
	return c.eng.Release(ctx, req, lease)
}

func newCountingChecker(file string) (*countingChecker, error) {
	set, err := rules.Parse("coverage.yaml", []byte(file))
	if err != nil {
		return nil, err
	}
	return &countingChecker{eng: rules.NewEngine(set, memstore.New(memstore.Options{}))}, nil
}

// coverageSources describe a request as the gateway example's services do: its path,
// and the client and member it names in headers.
func coverageSources() []httprules.Source {
	hdr := func(key, name string) httprules.Source {
		return httprules.Func(key, func(r *http.Request) (string, bool) {
			v := r.Header.Get(name)
			return v, v != ""
		})
	}
	return []httprules.Source{httprules.Path(), hdr("client", "X-Client"), hdr("member", "X-Member")}
}

// service answers the paths it owns with 200 and others with 404, with
// the middle layer in front when mw is not nil.
func coverageService(paths []string, mw func(http.Handler) http.Handler) http.Handler {
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		for _, p := range paths {
			if r.URL.Path == p {
				fmt.Fprintf(w, "{\"path\":%q}\n", p)
				return
			}
		}
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, "{\"path\":%q}\n", r.URL.Path)
	})
	if mw != nil {
		h = mw(h)
	}
	return h
}

// listenLoopback serves h on a fresh 127.0.0.1 port and returns its base URL
// and a function that stops it.
func listenLoopback(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), func() { srv.Close() }, nil
}

// coverageSetup is one placement: a loan service, a catalog service and a
// gateway in front of both.
type coverageSetup struct {
	loan, catalog, gateway string
}

func (s coverageSetup) direct(path string) string {
	if strings.HasPrefix(path, "/catalog") {
		return s.catalog + path
	}
	return s.loan + path
}

func buildCoverageSetup(mid, gw *countingChecker, closers *[]func()) (coverageSetup, error) {
	var s coverageSetup
	var midMW func(http.Handler) http.Handler
	if mid != nil {
		mw, err := httprules.Middleware(httprules.Options{Checker: mid, Sources: coverageSources()})
		if err != nil {
			return s, err
		}
		midMW = mw
	}
	var err error
	var stop func()
	if s.loan, stop, err = listenLoopback(coverageService(coverageLoan, midMW)); err != nil {
		return s, err
	}
	*closers = append(*closers, stop)
	if s.catalog, stop, err = listenLoopback(coverageService(coverageCatalog, nil)); err != nil {
		return s, err
	}
	*closers = append(*closers, stop)
	gwMW, err := httprules.Middleware(httprules.Options{Checker: gw, Sources: coverageSources()})
	if err != nil {
		return s, err
	}
	loanURL, _ := url.Parse(s.loan)
	catURL, _ := url.Parse(s.catalog)
	g, err := gateway.New(gateway.Options{Limit: gwMW, Routes: []gateway.Route{
		{Prefix: "/catalog", Upstream: catURL},
		{Prefix: "/", Upstream: loanURL},
	}})
	if err != nil {
		return s, err
	}
	if s.gateway, stop, err = listenLoopback(g); err != nil {
		return s, err
	}
	*closers = append(*closers, stop)
	return s, nil
}

func coverageSend(client *http.Client, u string) error {
	req, _ := http.NewRequest("GET", u, nil)
	req.Header.Set("X-Client", "measure")
	req.Header.Set("X-Member", "u0")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", u, resp.StatusCode)
	}
	return nil
}

// simCoverage runs the gateway example's coverage measurement: two setups of real
// services behind the real gateway on loopback, A with the limit only at
// the gateway (prefix /loan/), B with it only in the loan service's middle
// layer; every path is requested through the gateway and directly, and each
// placement's limiter says whether it counted the request.
func simCoverage() (coverageReport, error) {
	var rep coverageReport
	var closers []func()
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	gwA, err := newCountingChecker(coverageGatewayRules)
	if err != nil {
		return rep, err
	}
	midB, err := newCountingChecker(coverageServiceRules)
	if err != nil {
		return rep, err
	}
	gwB, err := newCountingChecker(coverageNoneRules)
	if err != nil {
		return rep, err
	}
	a, err := buildCoverageSetup(nil, gwA, &closers)
	if err != nil {
		return rep, err
	}
	b, err := buildCoverageSetup(midB, gwB, &closers)
	if err != nil {
		return rep, err
	}
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	label := func(b bool) string {
		if b {
			return "counted"
		}
		return "skipped"
	}
	for _, path := range append(append([]string{}, coverageLoan...), coverageCatalog...) {
		for _, access := range []string{"gateway", "direct"} {
			g0, m0 := gwA.counted.Load(), midB.counted.Load()
			ua, ub := a.gateway+path, b.gateway+path
			if access == "direct" {
				ua, ub = a.direct(path), b.direct(path)
			}
			if err := coverageSend(client, ua); err != nil {
				return rep, err
			}
			if err := coverageSend(client, ub); err != nil {
				return rep, err
			}
			g, m := gwA.counted.Load() > g0, midB.counted.Load() > m0
			rep.Rows = append(rep.Rows, coverageRow{Path: path, Access: access, Gateway: label(g), Middle: label(m)})
			rep.Total++
			if g {
				rep.Gateway++
			}
			if m {
				rep.Middle++
			}
			if !g && !m {
				rep.None++
			}
		}
	}
	if gwB.counted.Load() != 0 {
		return rep, errors.New("setup B's gateway counted a request; its rule matches no path")
	}
	return rep, nil
}

// runSimCoverage prints the gateway example's coverage table and what floodgate check
// says about the gateway's rule.
func runSimCoverage(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("floodgate sim coverage", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the result as JSON")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: floodgate sim coverage [--json]")
		fmt.Fprintln(stderr, "\nRuns a coverage measurement of a worked gateway example with the real gateway and middleware on loopback,")
		fmt.Fprintln(stderr, "then shows what `floodgate check --routes` reports for the gateway's rule.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("sim coverage takes no arguments; got %q", fs.Args())
	}
	rep, err := simCoverage()
	if err != nil {
		return err
	}

	// The same rule file and the four routes through floodgate check.
	dir, err := os.MkdirTemp("", "floodgate-coverage-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	rulesFile, routesFile := filepath.Join(dir, "gateway.yaml"), filepath.Join(dir, "routes.txt")
	var routes strings.Builder
	routes.WriteString("# the gateway example: the loan service's three paths and the catalog's one\n")
	for _, p := range append(append([]string{}, coverageLoan...), coverageCatalog...) {
		fmt.Fprintf(&routes, "GET %s\n", p)
	}
	if err := os.WriteFile(rulesFile, []byte(coverageGatewayRules), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(routesFile, []byte(routes.String()), 0o644); err != nil {
		return err
	}
	checkArgs := []string{rulesFile, "--routes", routesFile}
	if *asJSON {
		checkArgs = append(checkArgs, "--json")
	}
	var out, errOut bytes.Buffer
	if err := runCheck(checkArgs, &out, &errOut); err != nil {
		return fmt.Errorf("floodgate check: %v\n%s", err, errOut.String())
	}
	checkOut := strings.ReplaceAll(out.String(), dir+string(filepath.Separator), "")

	if *asJSON {
		rep.Check = json.RawMessage(checkOut)
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	fmt.Fprintln(stdout, "-- coverage: which placement counts a request --")
	fmt.Fprintf(stdout, "%-20s%-11s%10s%14s\n", "path", "access", "gateway", "middle layer")
	for _, r := range rep.Rows {
		fmt.Fprintf(stdout, "%-20s%-11s%10s%14s\n", r.Path, r.Access, r.Gateway, r.Middle)
	}
	fmt.Fprintf(stdout, "of %d path-access pairs, the gateway sees %d, the middle layer sees %d; %d pairs are outside every placement\n",
		rep.Total, rep.Gateway, rep.Middle, rep.None)
	fmt.Fprintln(stdout, "\nA: limit only at the gateway, rule `loan-prefix` (path prefix /loan/); B: limit only in the loan")
	fmt.Fprintln(stdout, "service's middle layer (httplimit middleware around every route). The catalog has no limiter in either.")
	fmt.Fprintln(stdout, "\n-- what `floodgate check gateway.yaml --routes routes.txt` says about the gateway's rule --")
	fmt.Fprintln(stdout, "gateway.yaml:")
	for _, l := range strings.Split(strings.TrimRight(coverageGatewayRules, "\n"), "\n") {
		fmt.Fprintln(stdout, "  "+l)
	}
	fmt.Fprintln(stdout)
	io.WriteString(stdout, checkOut)
	fmt.Fprintln(stdout, "\ncheck names both uncovered paths before traffic does: /loan-bulk/list, which the /loan/ prefix misses,")
	fmt.Fprintln(stdout, "and /catalog/search, which no rule names. It cannot see the access-route gap: direct requests")
	fmt.Fprintln(stdout, "never pass the gateway, whatever its rules say; only a limiter inside the service counts them.")
	return nil
}
