package rules

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse feeds arbitrary bytes to Parse: it must return a set or an error,
// never panic, and a set it returns must answer Keys and Rules.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*/*.yaml")
	more, _ := filepath.Glob("../examples/*.yaml")
	files = append(append(files, more...), "default.yaml")
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(composed))
	f.Add([]byte(plans))
	f.Add([]byte(pricedRules))
	f.Add([]byte(warned))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse("fuzz.yaml", data)
		if err != nil {
			if s != nil {
				t.Fatal("Parse returned both a set and an error")
			}
			return
		}
		s.Rules()
		req := Request{Descriptors: []Descriptor{
			desc("path=/loan/list", "member=u1", "client=web", "ip=10.0.0.1", "remote_address=1.2.3.4"),
			desc("key=value", "subkey=x"),
		}}
		if _, err := s.Keys(req); err != nil {
			t.Fatalf("Keys: %v", err)
		}
		s.Covering("GET", "/loan/list")
		e := NewEngine(s, nil)
		res, err := e.Check(context.Background(), req)
		if err != nil {
			t.Fatalf("Check: %v", err)
		}
		e.Release(context.Background(), req, res.Lease)
	})
}
