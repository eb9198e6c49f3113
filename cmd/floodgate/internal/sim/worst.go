package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/floodgate-dev/floodgate"
)

// MaxWorstLimit is the largest limit Worst searches with its default
// pattern size: each candidate runs up to four times the limit requests
// through the limiter, hundreds of times.
const MaxWorstLimit = 10_000

// WorstConfig says what Worst searches and how hard.
type WorstConfig struct {
	// Limit is the limit under attack, algorithm and parameters included.
	Limit floodgate.Limit
	// Seed seeds the random mutations; the same seed gives the same result.
	Seed uint64
	// Budget is the number of limiter runs each of the two searches may
	// spend on mutations after trying its structured candidates (default
	// 300).
	Budget int
	// MaxRequests caps the requests in one pattern (default 4·Limit, at
	// least 16, at most 4·MaxWorstLimit).
	MaxRequests int
	// Horizon is the span patterns are drawn in (default 3·Window).
	Horizon time.Duration
}

// Finding is the worst pattern one search found.
type Finding struct {
	// Requests is the pattern, sorted by time, on one key.
	Requests []Request
	// Summary is the limiter's record on it.
	Summary
	// Origin names the structured candidate the pattern grew from and how
	// many mutations it kept.
	Origin string
}

// WorstResult is what Worst found.
type WorstResult struct {
	// Overshoot is the pattern with the busiest window of accepted requests.
	Overshoot Finding
	// Compliant is the compliant pattern (never more than Limit units sent in
	// any window-long interval) with the most rejections; each of them is a
	// false reject. Its Rejected is zero when none was found.
	Compliant Finding
	// Runs is the number of limiter runs both searches made.
	Runs int
}

// pile is n requests at one millisecond.
type pile struct{ at, n int64 }

// Worst searches for traffic that breaks the two promises of cfg.Limit: a
// pattern that maximises the busiest window of accepted requests, and a
// compliant pattern that gets requests rejected. It tries structured
// candidates first (piles at window and slice boundaries, bursts after idle,
// streams at and above the limit's rate, the reference patterns), then
// hill-climbs from the best ones by mutating request times and pile sizes.
// Every candidate is run through a fresh real limiter.
func Worst(ctx context.Context, cfg WorstConfig) (WorstResult, error) {
	lim, err := floodgate.New(cfg.Limit)
	if err != nil {
		return WorstResult{}, err
	}
	full := lim.Limit()
	if full.Window < time.Millisecond {
		return WorstResult{}, fmt.Errorf("sim: worst needs a window of at least 1ms, got %v", full.Window)
	}
	if cfg.Budget <= 0 {
		cfg.Budget = 300
	}
	if cfg.MaxRequests <= 0 {
		if full.Limit > MaxWorstLimit {
			return WorstResult{}, fmt.Errorf("sim: a limit of %d is too large to search in seconds (at most %d): scale the limit and window down together, keeping their ratio", full.Limit, MaxWorstLimit)
		}
		cfg.MaxRequests = int(4 * full.Limit)
	}
	if cfg.MaxRequests > 4*MaxWorstLimit {
		return WorstResult{}, fmt.Errorf("sim: at most %d requests per pattern, got %d", 4*MaxWorstLimit, cfg.MaxRequests)
	}
	cfg.MaxRequests = max(cfg.MaxRequests, 16)
	if cfg.Horizon <= 0 {
		cfg.Horizon = 3 * full.Window
	}
	if cfg.Horizon < full.Window {
		return WorstResult{}, fmt.Errorf("sim: horizon %v is shorter than the window %v", cfg.Horizon, full.Window)
	}
	s := &searcher{
		ctx:   ctx,
		limit: full,
		L:     full.Limit,
		W:     int64(full.Window / time.Millisecond),
		H:     int64(cfg.Horizon / time.Millisecond),
		maxN:  int64(cfg.MaxRequests),
		rng:   rand.New(rand.NewPCG(cfg.Seed, 0x666c6f6f64676174)),
	}
	slices := full.Slices
	if slices <= 0 {
		slices = 12
	}
	s.S = max(1, s.W/int64(slices))

	var res WorstResult
	res.Overshoot, err = s.search(s.overshootCandidates(), false, cfg.Budget)
	if err != nil {
		return res, err
	}
	res.Compliant, err = s.search(s.compliantCandidates(), true, cfg.Budget)
	res.Runs = s.runs
	return res, err
}

type searcher struct {
	ctx     context.Context
	limit   floodgate.Limit
	L, W, S int64 // limit, window and slice, in requests and ms
	H       int64 // horizon in ms
	maxN    int64
	rng     *rand.Rand
	runs    int
}

type candidate struct {
	name  string
	piles []pile
}

// normalize sorts piles, merges piles at the same time, drops empty ones,
// clamps times to the horizon and trims the total to maxN.
func (s *searcher) normalize(ps []pile) []pile {
	out := make([]pile, 0, len(ps))
	for _, p := range ps {
		p.at = min(max(p.at, 0), s.H-1)
		if p.n > 0 {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].at < out[j].at })
	merged := out[:0]
	var total int64
	for _, p := range out {
		p.n = min(p.n, s.maxN-total)
		if p.n <= 0 {
			break
		}
		total += p.n
		if len(merged) > 0 && merged[len(merged)-1].at == p.at {
			merged[len(merged)-1].n += p.n
			continue
		}
		merged = append(merged, p)
	}
	return merged
}

func (s *searcher) requests(ps []pile, key string) []Request {
	var reqs []Request
	for _, p := range ps {
		for range p.n {
			reqs = append(reqs, Request{At: time.Duration(p.at) * time.Millisecond, Key: key, Cost: 1})
		}
	}
	return reqs
}

// compliant reports whether piles never put more than L requests in any
// W-long interval.
func (s *searcher) compliant(ps []pile) bool {
	var sum int64
	j := 0
	for i := range ps {
		sum += ps[i].n
		for ps[i].at-ps[j].at >= s.W {
			sum -= ps[j].n
			j++
		}
		if sum > s.L {
			return false
		}
	}
	return true
}

// eval runs piles through a fresh limiter and returns its summary.
func (s *searcher) eval(ps []pile, key string) ([]Request, Summary, error) {
	reqs := s.requests(ps, key)
	s.runs++
	outs, err := Run(s.ctx, s.limit, reqs)
	if err != nil {
		return nil, Summary{}, err
	}
	return reqs, Summarize(reqs, outs, s.L, time.Duration(s.W)*time.Millisecond), nil
}

// better reports whether a beats b for the search. The busiest-window
// search wants a higher busiest window, then fewer requests (the plainest
// attack); the compliant search wants more rejections, then more requests
// (so that when nothing is rejected, the pattern shown is the heaviest
// compliant traffic that got through).
func better(a, b Summary, compliant bool) bool {
	if compliant {
		if a.Rejected != b.Rejected {
			return a.Rejected > b.Rejected
		}
		return a.Requests > b.Requests
	}
	if a.Busiest != b.Busiest {
		return a.Busiest > b.Busiest
	}
	return a.Requests < b.Requests
}

type scored struct {
	candidate
	reqs []Request
	sum  Summary
}

func (s *searcher) search(cands []candidate, compliant bool, budget int) (Finding, error) {
	key := "worst"
	if compliant {
		key = "compliant"
	}
	var pool []scored
	for _, c := range cands {
		if err := s.ctx.Err(); err != nil {
			return Finding{}, err
		}
		c.piles = s.normalize(c.piles)
		if len(c.piles) == 0 || (compliant && !s.compliant(c.piles)) {
			continue
		}
		reqs, sum, err := s.eval(c.piles, key)
		if err != nil {
			return Finding{}, err
		}
		pool = append(pool, scored{c, reqs, sum})
	}
	if len(pool) == 0 {
		return Finding{}, fmt.Errorf("sim: no %s candidate fits limit %d per %dms", key, s.L, s.W)
	}
	sort.SliceStable(pool, func(i, j int) bool { return better(pool[i].sum, pool[j].sum, compliant) })
	best := pool[0]
	bestKept := 0
	starts := min(3, len(pool))
	for k := 0; k < starts; k++ {
		cur := pool[k]
		kept := 0
		for spent := 0; spent < budget/starts; {
			if err := s.ctx.Err(); err != nil {
				return Finding{}, err
			}
			next := s.normalize(s.mutate(cur.piles))
			if len(next) == 0 {
				continue
			}
			if compliant && !s.compliant(next) {
				spent++ // cheap, but bounded so a tight corner cannot loop forever
				continue
			}
			spent++
			reqs, sum, err := s.eval(next, key)
			if err != nil {
				return Finding{}, err
			}
			if !better(cur.sum, sum, compliant) { // at least as good: keep, so plateaus are walked
				cur = scored{candidate{cur.name, next}, reqs, sum}
				kept++
			}
		}
		if better(cur.sum, best.sum, compliant) {
			best, bestKept = cur, kept
		}
	}
	origin := best.name
	if bestKept > 0 {
		origin = fmt.Sprintf("%s, then %d kept mutations", best.name, bestKept)
	}
	return Finding{Requests: best.reqs, Summary: best.sum, Origin: origin}, nil
}

// mutate returns a changed copy of ps.
func (s *searcher) mutate(ps []pile) []pile {
	out := append([]pile(nil), ps...)
	r := s.rng
	i := r.IntN(len(out))
	shift := func() int64 {
		switch r.IntN(4) {
		case 0:
			return int64(r.IntN(3)) - 1
		case 1:
			return r.Int64N(2*s.S+1) - s.S
		case 2:
			return r.Int64N(2*s.W+1) - s.W
		default:
			return r.Int64N(21) - 10
		}
	}
	switch r.IntN(8) {
	case 0, 1: // move one pile
		out[i].at += shift()
	case 2: // grow or shrink one pile
		d := 1 + r.Int64N(out[i].n/2+1)
		if r.IntN(2) == 0 {
			d = -d
		}
		out[i].n += d
	case 3: // split a pile in two
		if out[i].n > 1 {
			m := 1 + r.Int64N(out[i].n-1)
			out[i].n -= m
			out = append(out, pile{out[i].at + shift(), m})
		}
	case 4: // fold a pile into another
		if len(out) > 1 {
			j := r.IntN(len(out))
			if j != i {
				out[j].n += out[i].n
				out[i].n = 0
			}
		}
	case 5: // add a pile
		out = append(out, pile{r.Int64N(s.H), 1 + r.Int64N(s.L)})
	case 6: // drop a pile
		out[i].n = 0
	case 7: // shift everything from pile i on
		d := shift()
		for k := range out {
			if out[k].at >= out[i].at {
				out[k].at += d
			}
		}
	}
	return out
}

// stream is one request every step ms in [from, to).
func stream(from, to, step int64) []pile {
	var ps []pile
	for t := from; t < to; t += max(step, 1) {
		ps = append(ps, pile{t, 1})
	}
	return ps
}

// spread is n requests spread evenly over [from, from+span).
func spread(from, span, n int64) []pile {
	ps := make([]pile, 0, n)
	for i := range n {
		ps = append(ps, pile{from + i*span/max(n, 1), 1})
	}
	return ps
}

func (s *searcher) seedCandidates() []candidate {
	L, W, S, H := s.L, s.W, s.S, s.H
	var out []candidate
	if 2*L <= W {
		out = append(out, candidate{"uniform 2x", stream(0, H, W/(2*L))})
	}
	var piled []pile
	for _, b := range []int64{W, 2 * W} {
		piled = append(piled, spread(b-S, S, L)...)
		piled = append(piled, spread(b, S, L)...)
	}
	out = append(out, candidate{"piled at the window boundary", piled})
	var spaced []pile
	for k := int64(0); k*W < H; k++ {
		spaced = append(spaced, spread(k*W, S, L)...)
	}
	out = append(out, candidate{"spaced at the limit", spaced})
	return out
}

func (s *searcher) overshootCandidates() []candidate {
	L, W, S := s.L, s.W, s.S
	out := s.seedCandidates()
	starts := uniq(0, S-1, W/2, W-S, W-1)
	gaps := uniq(1, S-1, S, S+1, W-S-1, W-S, W-S+1, W/2, W-1)
	for _, a := range starts {
		for _, d := range gaps {
			for _, n := range uniq(L, 2*L) {
				out = append(out,
					candidate{fmt.Sprintf("piles of %d at %dms and %dms", n, a, a+d), []pile{{a, n}, {a + d, n}}},
					candidate{fmt.Sprintf("piles of %d at %dms, %dms and %dms", n, a, a+d, a+2*d), []pile{{a, n}, {a + d, n}, {a + 2*d, n}}})
			}
		}
	}
	// Bursts after idle: quiet for a window, one burst, then a stream at
	// one, two or four times the limit's rate for a window.
	for _, n := range uniq(1, L/10, L/2, L, 2*L) {
		for _, k := range []int64{1, 2, 4} {
			ps := []pile{{W, n}}
			ps = append(ps, stream(W+1, 2*W+1, W/(k*L))...)
			out = append(out, candidate{fmt.Sprintf("burst of %d after a quiet window, then %dx the rate", n, k), ps})
		}
	}
	for _, k := range []int64{1, 2, 4} {
		out = append(out, candidate{fmt.Sprintf("stream at %dx the rate", k), stream(0, s.H, W/(k*L))})
	}
	out = append(out, candidate{"one pile of everything", []pile{{W, s.maxN}}})
	return out
}

func (s *searcher) compliantCandidates() []candidate {
	L, W, S := s.L, s.W, s.S
	out := s.seedCandidates()
	out = append(out, candidate{"stream at exactly the limit", stream(0, s.H, (W+L-1)/L)})
	for _, a := range uniq(0, 1, S-1, S, W/2, W-1) {
		for _, d := range uniq(0, 1, S/2, S, W/2) {
			var ps []pile
			for t := a; t < s.H; t += W + d {
				ps = append(ps, pile{t, L})
			}
			out = append(out, candidate{fmt.Sprintf("piles of %d every %dms from %dms", L, W+d, a), ps})
		}
	}
	for _, k := range uniq(2, 3, 4, 6, 12) {
		if k > L {
			continue
		}
		out = append(out, candidate{fmt.Sprintf("piles of %d every %dms", L/k, W/k), func() []pile {
			var ps []pile
			for t := int64(0); t < s.H; t += (W + k - 1) / k {
				ps = append(ps, pile{t, L / k})
			}
			return ps
		}()})
	}
	// A burst of the whole allowance after a quiet spell, then the
	// allowance again spread over the next window.
	for _, q := range uniq(0, S, W/2, W) {
		ps := []pile{{q, L}}
		ps = append(ps, spread(q+W, W, L)...)
		out = append(out, candidate{fmt.Sprintf("burst of %d at %dms, then %d spread over the next window", L, q, L), ps})
	}
	return out
}

// uniq returns the distinct non-negative values of vs, in order.
func uniq(vs ...int64) []int64 {
	var out []int64
	seen := map[int64]bool{}
	for _, v := range vs {
		if v >= 0 && !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}
