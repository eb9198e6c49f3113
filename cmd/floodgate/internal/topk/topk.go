// Package topk keeps an approximate list of the most frequent keys in a
// stream using bounded memory.
//
// A Sketch implements the space-saving algorithm (Metwally, Agrawal and El
// Abbadi, 2005): it holds at most Capacity counters. A key already held is
// counted exactly from the moment it entered; a new key, when the sketch is
// full, takes over the counter of the least-counted key and inherits its count
// as an overestimate. Every key whose true count exceeds N/Capacity (N the
// total counted) is guaranteed to be held, and each reported count C with
// error E satisfies C-E <= true count <= C.
//
// Floodgate uses it for the status page's "top rejected keys": the memory it
// takes does not grow with the number of distinct clients.
package topk

import (
	"container/heap"
	"sort"
	"sync"
)

// DefaultMaxKeyLen is the longest key a Sketch stores when Options.MaxKeyLen
// is zero. Longer keys are cut to this many bytes, so an attacker who sends
// huge keys cannot make the sketch hold huge strings.
const DefaultMaxKeyLen = 256

// Entry is one key with its estimated count.
type Entry struct {
	// Key is the key, cut to the sketch's maximum key length.
	Key string `json:"key"`
	// Count is an upper bound on the number of times Key was added.
	Count uint64 `json:"count"`
	// Err bounds the overestimate: the true count is at least Count-Err.
	Err uint64 `json:"err"`
}

// Sketch is a bounded top-k counter. The zero value is not usable; call New.
// A Sketch is safe for concurrent use.
type Sketch struct {
	mu     sync.Mutex
	cap    int
	maxKey int
	total  uint64
	index  map[string]*counter
	heap   minHeap // ordered by count, least first
}

type counter struct {
	key   string
	count uint64
	err   uint64
	pos   int // index in heap
}

// New returns a sketch that holds at most capacity counters, cutting keys to
// maxKeyLen bytes (DefaultMaxKeyLen if maxKeyLen <= 0). A capacity below 1 is
// taken as 1.
func New(capacity, maxKeyLen int) *Sketch {
	if capacity < 1 {
		capacity = 1
	}
	if maxKeyLen <= 0 {
		maxKeyLen = DefaultMaxKeyLen
	}
	return &Sketch{
		cap:    capacity,
		maxKey: maxKeyLen,
		index:  make(map[string]*counter, capacity),
		heap:   make(minHeap, 0, capacity),
	}
}

// Capacity returns the largest number of keys the sketch holds.
func (s *Sketch) Capacity() int { return s.cap }

// Add counts n occurrences of key. Adding zero does nothing.
func (s *Sketch) Add(key string, n uint64) {
	if n == 0 {
		return
	}
	if len(key) > s.maxKey {
		key = key[:s.maxKey]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total += n
	if c, ok := s.index[key]; ok {
		c.count += n
		heap.Fix(&s.heap, c.pos)
		return
	}
	if len(s.heap) < s.cap {
		c := &counter{key: key, count: n}
		s.index[key] = c
		heap.Push(&s.heap, c)
		return
	}
	// Full: the new key replaces the least-counted one and inherits its
	// count as its error bound.
	c := s.heap[0]
	delete(s.index, c.key)
	c.key = key
	c.err = c.count
	c.count += n
	s.index[key] = c
	heap.Fix(&s.heap, 0)
}

// Total returns the sum of all counts added (including those of keys no
// longer held).
func (s *Sketch) Total() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

// Top returns up to k entries with the highest counts, highest first; ties are
// ordered by key. A k of zero or less returns every entry held.
func (s *Sketch) Top(k int) []Entry {
	s.mu.Lock()
	out := make([]Entry, len(s.heap))
	for i, c := range s.heap {
		out[i] = Entry{Key: c.key, Count: c.count, Err: c.err}
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Key < out[j].Key
	})
	if k > 0 && k < len(out) {
		out = out[:k]
	}
	return out
}

// Decay multiplies every count (and error bound) by num/den, dropping keys
// whose count falls to zero, so that old traffic weighs less than new. Calling
// Decay(1, 2) once a minute gives the counts a half-life of a minute. It does
// nothing unless 0 <= num < den.
func (s *Sketch) Decay(num, den uint64) {
	if den == 0 || num >= den {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total = s.total * num / den
	kept := s.heap[:0]
	for _, c := range s.heap {
		c.count = c.count * num / den
		c.err = c.err * num / den
		if c.count == 0 {
			delete(s.index, c.key)
			continue
		}
		kept = append(kept, c)
	}
	for i := len(kept); i < len(s.heap); i++ {
		s.heap[i] = nil
	}
	s.heap = kept
	for i, c := range s.heap {
		c.pos = i
	}
	heap.Init(&s.heap)
}

// Reset forgets every key.
func (s *Sketch) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.index)
	clear(s.heap)
	s.heap = s.heap[:0]
	s.total = 0
}

// minHeap orders counters by count, least first.
type minHeap []*counter

func (h minHeap) Len() int           { return len(h) }
func (h minHeap) Less(i, j int) bool { return h[i].count < h[j].count }
func (h minHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].pos = i
	h[j].pos = j
}
func (h *minHeap) Push(x any) {
	c := x.(*counter)
	c.pos = len(*h)
	*h = append(*h, c)
}
func (h *minHeap) Pop() any {
	old := *h
	n := len(old)
	c := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	return c
}
