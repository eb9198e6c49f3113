package storetest_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
	"github.com/floodgate-dev/floodgate/storetest"
)

// mapStore is the simplest store that keeps the contract: one mutex, one
// map of states by limit and key. flaw, when set, breaks it on purpose.
type mapStore struct {
	mu     sync.Mutex
	states map[stateID][]int64
	flaw   string
}

// stateID names a state: the limit's Config and the key.
type stateID struct {
	limit algorithm.Config
	key   string
}

func newMapStore(flaw string) *mapStore {
	return &mapStore{states: map[stateID][]int64{}, flaw: flaw}
}

func (s *mapStore) id(a algorithm.Algorithm, key string) stateID {
	id := stateID{a.Config(), key}
	if s.flaw == "limits-shared" {
		id.limit = algorithm.Config{}
	}
	if s.flaw == "keys-cut" && len(key) > 8 {
		id.key = key[:8]
	}
	return id
}

func (s *mapStore) state(id stateID, words int) []int64 {
	if st, ok := s.states[id]; ok {
		return st
	}
	return make([]int64, words)
}

func (s *mapStore) Decide(ctx context.Context, now int64, reqs []store.Request, out []algorithm.Decision) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Decide on copies; write them back only if every request that is
	// not shadow is allowed. A key named twice sees its first decision.
	copies := map[stateID][]int64{}
	ok := true
	for i, r := range reqs {
		if r.Algorithm == nil {
			return store.ErrNoAlgorithm
		}
		id := s.id(r.Algorithm, r.Key)
		cp, seen := copies[id]
		if !seen {
			cp = append([]int64(nil), s.state(id, r.Algorithm.Words())...)
			copies[id] = cp
		}
		out[i] = r.Algorithm.Decide(cp, now, r.Cost)
		ok = ok && (out[i].Allowed || r.Shadow)
	}
	if ok || s.flaw == "count-on-reject" {
		for id, cp := range copies {
			s.states[id] = cp
		}
	}
	return nil
}

func (s *mapStore) DecideOne(ctx context.Context, now int64, req store.Request) (algorithm.Decision, error) {
	out := make([]algorithm.Decision, 1)
	err := s.Decide(ctx, now, []store.Request{req}, out)
	return out[0], err
}

func (s *mapStore) Release(ctx context.Context, now int64, reqs []store.Request) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range reqs {
		id := s.id(r.Algorithm, r.Key)
		st := s.state(id, r.Algorithm.Words())
		r.Algorithm.Release(st, now, r.Cost)
		s.states[id] = st
	}
	return nil
}

// A straightforward correct store passes the suite.
func TestMapStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return newMapStore(os.Getenv("STORETEST_FLAW")) })
}

// The suite fails a store with any of these flaws: each runs TestMapStore
// in a child process with the flaw set, which must fail, naming the check
// that caught it.
func TestCatchesFlaws(t *testing.T) {
	for flaw, check := range map[string]string{
		"count-on-reject": "AllOrNothing",
		"limits-shared":   "Differential", // before LimitsApart, which catches it too
		"keys-cut":        "KeysAreBytes",
	} {
		t.Run(flaw, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestMapStore$")
			cmd.Env = append(os.Environ(), "STORETEST_FLAW="+flaw)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a store with the flaw %s", flaw)
			}
			if !strings.Contains(string(out), "--- FAIL: TestMapStore/"+check) {
				t.Fatalf("the flaw %s was not caught by %s:\n%s", flaw, check, out)
			}
		})
	}
}
