package loadgen

import (
	"math"
	"math/bits"
	"time"
)

// subBits sets the histogram's precision: each power of two is split into
// 2^subBits linear buckets, so a recorded value is known to within
// 1/2^subBits (under 0.8%) of itself.
const subBits = 7

const (
	subCount = 1 << subBits
	// maxExp covers values up to about 2^(maxExp+subBits+1) ns (≈ 39 hours);
	// larger values are clamped into the last bucket.
	maxExp  = 40
	buckets = subCount + maxExp*subCount
)

// Histogram records durations in log-linear buckets, in the manner of
// HdrHistogram: constant memory, constant-time recording, and quantiles within
// 1% of the true sample quantile. The zero value is ready to use. A Histogram
// is not safe for concurrent use; give each goroutine its own and Merge them.
type Histogram struct {
	counts [buckets]uint64
	n      uint64
	sum    float64
	min    int64
	max    int64
}

func bucketOf(v int64) int {
	if v < 0 {
		v = 0
	}
	if v < subCount {
		return int(v)
	}
	e := bits.Len64(uint64(v)) - subBits - 1 // v>>e is in [subCount, 2*subCount)
	i := subCount + e*subCount + int(v>>e) - subCount
	if i >= buckets {
		return buckets - 1
	}
	return i
}

// bucketHigh returns the largest value that falls into bucket i.
func bucketHigh(i int) int64 {
	if i < subCount {
		return int64(i)
	}
	e := (i - subCount) / subCount
	m := int64((i-subCount)%subCount + subCount)
	return (m+1)<<e - 1
}

// Record adds one observation.
func (h *Histogram) Record(d time.Duration) {
	v := int64(d)
	if v < 0 {
		v = 0
	}
	h.counts[bucketOf(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	h.sum += float64(v)
}

// Merge adds every observation of o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
	h.n += o.n
	h.sum += o.sum
}

// Count returns the number of observations.
func (h *Histogram) Count() uint64 { return h.n }

// Min returns the smallest observation, or 0 if there is none.
func (h *Histogram) Min() time.Duration { return time.Duration(h.min) }

// Max returns the largest observation, or 0 if there is none.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Mean returns the average observation, or 0 if there is none.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.n))
}

// Quantile returns the smallest recorded value v such that a fraction q of
// observations are at most v (to the histogram's precision; the value
// reported is the top of its bucket, never more than Max). q is clamped to
// [0, 1]; with no observations it returns 0.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	if q <= 0 {
		return time.Duration(h.min)
	}
	if q > 1 || math.IsNaN(q) {
		q = 1
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	if rank < 1 {
		rank = 1
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			v := bucketHigh(i)
			if v > h.max || i == buckets-1 {
				v = h.max
			}
			if v < h.min {
				v = h.min
			}
			return time.Duration(v)
		}
	}
	return time.Duration(h.max)
}
