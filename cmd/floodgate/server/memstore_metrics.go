package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-dev/floodgate/memstore"
)

// registerMemStore adds the memory store's size and eviction figures to
// reg, read from the store when scraped.
func registerMemStore(reg *prometheus.Registry, m *memstore.Store) {
	counter := func(name, help string, f func(memstore.Stats) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(f(m.Stats())) })
	}
	gauge := func(name, help string, f func(memstore.Stats) int64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help},
			func() float64 { return float64(f(m.Stats())) })
	}
	reg.MustRegister(
		gauge("floodgate_memstore_bytes", "Bytes of counter state the memory store holds (tables, out-of-line states, eviction summary).",
			func(s memstore.Stats) int64 { return s.Bytes }),
		gauge("floodgate_memstore_max_bytes", "The memory store's bound in bytes (store.max_bytes); 0 if none.",
			func(memstore.Stats) int64 { return m.MaxBytes() }),
		counter("floodgate_memstore_evictions_total", "Keys evicted, while not idle, to keep the memory store within max_keys or max_bytes.",
			func(s memstore.Stats) int64 { return s.Evicted }),
		counter("floodgate_memstore_expired_total", "Idle keys the memory store reclaimed.",
			func(s memstore.Stats) int64 { return s.Expired }),
		counter("floodgate_memstore_charged_total", "New keys charged, from the eviction summary, what evicted keys with their hash had used.",
			func(s memstore.Stats) int64 { return s.Charged }),
	)
}
