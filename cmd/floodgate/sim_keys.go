package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/rules"
)

// The gateway example's key-selection measurement: the same 70-request stream and the
// same limit of 20 in one long fixed window, counted by four different keys,
// each run through the real rule engine and memory store under a virtual
// clock. A fifth run puts a per-member and a global limit together.

// keysLimit is the one number written in every rule: 20 per bucket.
const keysLimit = 20

// keysWindow is longer than the run, so every request falls in one window.
const keysWindow = time.Hour

var keysMembers = []string{"u1", "u2", "u3", "u4", "u5"}

// keysRequest is one request of the stream.
type keysRequest struct{ client, member, path string }

// keysStream builds the gateway example's stream: the batch client's member u5 sends 40
// requests to /loan/list; the mobile client's members u1, u2 and u3 send 12,
// 8 and 4, each member's i-th request going to /loan/borrow, /loan/list,
// /loan-bulk/list in turn (i mod 3); the web client's member u4 sends 6 to
// /loan/list.
func keysStream() []keysRequest {
	loan := []string{"/loan/borrow", "/loan/list", "/loan-bulk/list"}
	var out []keysRequest
	for _, s := range []struct {
		client, member string
		n              int
	}{{"batch", "u5", 40}, {"mobile", "u1", 12}, {"mobile", "u2", 8}, {"mobile", "u3", 4}, {"web", "u4", 6}} {
		for i := 0; i < s.n; i++ {
			path := loan[1]
			if s.client == "mobile" {
				path = loan[i%3]
			}
			out = append(out, keysRequest{s.client, s.member, path})
		}
	}
	return out
}

// keysPR is a passed/rejected pair.
type keysPR struct {
	Passed   int `json:"passed"`
	Rejected int `json:"rejected"`
}

// keysRow is one key choice's outcome.
type keysRow struct {
	Key      string            `json:"key"`
	Buckets  int               `json:"buckets"`
	Cap      int64             `json:"cap"`
	Passed   int               `json:"passed"`
	Rejected int               `json:"rejected"`
	Members  map[string]keysPR `json:"members"`
	// GlobalLimit and RejectedBy are set for the combined row.
	GlobalLimit int64          `json:"global_limit,omitempty"`
	RejectedBy  map[string]int `json:"rejected_by,omitempty"`
}

// keysDoc is sim keys' JSON report.
type keysDoc struct {
	Limit         int64     `json:"limit"`
	Window        string    `json:"window"`
	Requests      int       `json:"requests"`
	Keys          []keysRow `json:"keys"`
	ActiveMembers int64     `json:"active_members"`
	MemberCap     int64     `json:"member_cap_at_active_members"`
}

// keysRuleFile writes the rule file of one key choice.
func keysRuleFile(countBy string, global int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "domain: keys\nrules:\n")
	fmt.Fprintf(&b, "  - name: per-%s\n    count_by: %s\n    limit: %d\n    window: %v\n    algorithm: fixed-window\n",
		strings.ReplaceAll(strings.Trim(countBy, "[]"), ", ", "-"), countBy, keysLimit, keysWindow)
	if global > 0 {
		fmt.Fprintf(&b, "  - name: global\n    count_by: global\n    limit: %d\n    window: %v\n    algorithm: fixed-window\n", global, keysWindow)
	}
	return b.String()
}

// simKeys runs the stream through each key choice; global is the combined
// row's global limit.
func simKeys(ctx context.Context, global int64) (keysDoc, error) {
	stream := keysStream()
	doc := keysDoc{Limit: keysLimit, Window: keysWindow.String(), Requests: len(stream)}
	for _, k := range []struct {
		name, countBy string
		global        int64
	}{
		{"fixed", "global", 0},
		{"client", "[client]", 0},
		{"member", "[member]", 0},
		{"client+path", "[client, path]", 0},
		{"member+global", "[member]", global},
	} {
		set, err := rules.Parse("sim-keys-"+k.name+".yaml", []byte(keysRuleFile(k.countBy, k.global)))
		if err != nil {
			return doc, err
		}
		// The virtual clock starts at a window boundary and moves 1 ms per
		// request, so the whole run sits in one fixed window.
		now := time.Unix(0, 0).Add(1000 * keysWindow)
		eng := rules.NewEngine(set, memstore.New(memstore.Options{}), rules.WithClock(func() time.Time { return now }))
		row := keysRow{Key: k.name, Members: map[string]keysPR{}, GlobalLimit: k.global}
		if k.global > 0 {
			row.RejectedBy = map[string]int{}
		}
		buckets := map[string]int64{} // key -> its rule's limit
		perRule := map[string]int{}
		for _, r := range stream {
			res, err := eng.Check(ctx, rules.Request{Descriptors: []rules.Descriptor{{
				{Key: "client", Value: r.client}, {Key: "member", Value: r.member}, {Key: "path", Value: r.path},
			}}})
			if err != nil {
				return doc, err
			}
			for _, st := range res.Statuses {
				if _, ok := buckets[st.Key]; !ok {
					buckets[st.Key] = st.Limit
					perRule[st.Rule]++
				}
			}
			m := row.Members[r.member]
			if res.Allowed {
				row.Passed++
				m.Passed++
			} else {
				row.Rejected++
				m.Rejected++
				if row.RejectedBy != nil {
					for _, name := range res.Rejected {
						row.RejectedBy[name]++
					}
				}
			}
			row.Members[r.member] = m
			now = now.Add(time.Millisecond)
		}
		row.Buckets = len(buckets)
		if k.global > 0 {
			// Every request passes both: the cap is the smaller of the
			// members' total and the global limit.
			row.Cap = min(int64(perRule["per-member"])*keysLimit, k.global)
		} else {
			row.Cap = int64(row.Buckets) * keysLimit
		}
		doc.Keys = append(doc.Keys, row)
	}
	return doc, nil
}

// runSimKeys reproduces the gateway example's key-selection table through the rule
// engine.
func runSimKeys(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("floodgate sim keys", flag.ContinueOnError)
	global := fs.Int64("global", 40, "the global limit of the fifth run (per-member 20 and global together)")
	active := fs.Int64("members", 5000, "active members, for the cap the member key implies")
	asJSON := fs.Bool("json", false, "print the table as JSON")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: floodgate sim keys [--global N] [--members N] [--json]")
		fmt.Fprintln(stderr, "\nRuns a published 70-request stream (the gateway example's) through the rule engine with a limit of 20 per")
		fmt.Fprintln(stderr, "bucket counted by one global bucket, client, member and client+path; then per member")
		fmt.Fprintln(stderr, "and global together.")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if *global < 1 || *global > rules.Max().Limit {
		return fmt.Errorf("sim keys: --global must be between 1 and %d", rules.Max().Limit)
	}
	if *active < 1 || *active > 1e9 {
		return fmt.Errorf("sim keys: --members must be between 1 and 1000000000")
	}
	doc, err := simKeys(context.Background(), *global)
	if err != nil {
		return fmt.Errorf("sim keys: %w", err)
	}
	doc.ActiveMembers, doc.MemberCap = *active, *active*keysLimit
	if *asJSON {
		return writeJSON(stdout, doc)
	}
	printKeys(stdout, doc)
	return nil
}

func printKeys(w io.Writer, doc keysDoc) {
	fmt.Fprintf(w, "key selection: %d requests, limit %d per bucket, one fixed window of %s, through the rule engine\n",
		doc.Requests, doc.Limit, doc.Window)
	fmt.Fprintf(w, "%-14s%8s%7s%8s%9s", "key", "buckets", "cap", "passed", "rejected")
	for _, m := range keysMembers {
		fmt.Fprintf(w, "%11s", m+" p/r")
	}
	fmt.Fprintln(w)
	for _, r := range doc.Keys {
		fmt.Fprintf(w, "%-14s%8d%7d%8d%9d", r.Key, r.Buckets, r.Cap, r.Passed, r.Rejected)
		for _, m := range keysMembers {
			pr := r.Members[m]
			fmt.Fprintf(w, "%11s", fmt.Sprintf("%d/%d", pr.Passed, pr.Rejected))
		}
		fmt.Fprintln(w)
	}
	for _, r := range doc.Keys {
		if r.RejectedBy == nil {
			continue
		}
		var parts []string
		for _, name := range slices.Sorted(maps.Keys(r.RejectedBy)) {
			parts = append(parts, fmt.Sprintf("%s %d", name, r.RejectedBy[name]))
		}
		fmt.Fprintf(w, "\n%s: per-member limit %d and global limit %d in one decision; rejections by rule: %s\n",
			r.Key, doc.Limit, r.GlobalLimit, strings.Join(parts, ", "))
		fmt.Fprintf(w, "  the global limit caps the service at %d per window however many members there are;\n", r.GlobalLimit)
		fmt.Fprintf(w, "  the member limit stops u5 at %d so it cannot spend the service's capacity alone.\n", doc.Limit)
	}
	fmt.Fprintf(w, "\nthe one written limit is %d; the real cap is %d × buckets. Counted by member, %d active members\n"+
		"make the same rule %d requests per window.\n", doc.Limit, doc.Limit, doc.ActiveMembers, doc.MemberCap)
}
