package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// The four key choices reproduce the gateway example's table exactly, through the rule
// engine; the fifth shows per-member and global limits together.
func TestSimKeysBaselineTable(t *testing.T) {
	var out bytes.Buffer
	if err := dispatch([]string{"sim", "keys", "--json"}, &out, &out); err != nil {
		t.Fatalf("sim keys: %v\n%s", err, out.String())
	}
	var doc keysDoc
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("JSON: %v\n%s", err, out.String())
	}
	if doc.Limit != 20 || doc.Requests != 70 {
		t.Fatalf("limit %d, requests %d", doc.Limit, doc.Requests)
	}
	type pr = keysPR
	want := []struct {
		key                string
		buckets, cap       int
		passed, rejected   int
		u1, u2, u3, u4, u5 pr
		rejectedBy         map[string]int
	}{
		{"fixed", 1, 20, 20, 50, pr{0, 12}, pr{0, 8}, pr{0, 4}, pr{0, 6}, pr{20, 20}, nil},
		{"client", 3, 60, 46, 24, pr{12, 0}, pr{8, 0}, pr{0, 4}, pr{6, 0}, pr{20, 20}, nil},
		{"member", 5, 100, 50, 20, pr{12, 0}, pr{8, 0}, pr{4, 0}, pr{6, 0}, pr{20, 20}, nil},
		{"client+path", 5, 100, 50, 20, pr{12, 0}, pr{8, 0}, pr{4, 0}, pr{6, 0}, pr{20, 20}, nil},
		{"member+global", 6, 40, 40, 30, pr{12, 0}, pr{8, 0}, pr{0, 4}, pr{0, 6}, pr{20, 20},
			map[string]int{"per-member": 20, "global": 10}},
	}
	if len(doc.Keys) != len(want) {
		t.Fatalf("%d rows, want %d", len(doc.Keys), len(want))
	}
	for i, w := range want {
		g := doc.Keys[i]
		if g.Key != w.key || g.Buckets != w.buckets || g.Cap != int64(w.cap) || g.Passed != w.passed || g.Rejected != w.rejected {
			t.Errorf("row %d: got %s %d/%d/%d/%d, want %s %d/%d/%d/%d", i,
				g.Key, g.Buckets, g.Cap, g.Passed, g.Rejected, w.key, w.buckets, w.cap, w.passed, w.rejected)
		}
		for m, p := range map[string]pr{"u1": w.u1, "u2": w.u2, "u3": w.u3, "u4": w.u4, "u5": w.u5} {
			if g.Members[m] != p {
				t.Errorf("%s %s: %+v, want %+v", w.key, m, g.Members[m], p)
			}
		}
		if w.rejectedBy != nil {
			for r, n := range w.rejectedBy {
				if g.RejectedBy[r] != n {
					t.Errorf("%s rejected by %s: %d, want %d", w.key, r, g.RejectedBy[r], n)
				}
			}
		}
	}
	if doc.MemberCap != 100000 {
		t.Errorf("member cap at 5000 members = %d, want 100000", doc.MemberCap)
	}
}

func TestSimKeysStreamOrder(t *testing.T) {
	s := keysStream()
	if len(s) != 70 {
		t.Fatalf("%d requests", len(s))
	}
	// u2's requests cycle from /loan/borrow again: the index is per member.
	if s[52] != (keysRequest{"mobile", "u2", "/loan/borrow"}) || s[54] != (keysRequest{"mobile", "u2", "/loan-bulk/list"}) {
		t.Fatalf("u2 starts with %v %v", s[52], s[54])
	}
}

func TestSimKeysText(t *testing.T) {
	var out bytes.Buffer
	if err := dispatch([]string{"sim", "keys", "--global", "45"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"fixed                1     20      20       50       0/12        0/8        0/4        0/6      20/20",
		"client+path          5    100      50       20       12/0        8/0        4/0        6/0      20/20",
		"global limit 45",
		"100000 requests per window",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if err := dispatch([]string{"sim", "keys", "--global", "0"}, &out, &out); err == nil {
		t.Error("--global 0 accepted")
	}
	if _, err := simKeys(context.Background(), 1000); err != nil {
		t.Error(err)
	}
}
