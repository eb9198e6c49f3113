package metrics

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// storeSeries is one store figure: its description, its type, and its
// value in a StoreHealth.
type storeSeries struct {
	desc  *prometheus.Desc
	typ   prometheus.ValueType
	value func(StoreHealth) float64
}

func series(name, help string, typ prometheus.ValueType, value func(StoreHealth) float64) storeSeries {
	return storeSeries{prometheus.NewDesc(name, help, nil, nil), typ, value}
}

// Series of every store.
var storeAlways = []storeSeries{
	series("floodgate_store_up", "1 if the counter store answers, 0 if not.", prometheus.GaugeValue,
		func(h StoreHealth) float64 { return boolFloat(h.Up) }),
	series("floodgate_store_errors_total", "Counter store operations that failed.", prometheus.CounterValue,
		func(h StoreHealth) float64 { return float64(h.Errors) }),
	series("floodgate_keys_tracked", "Keys the counter store (or this node's local view) holds.", prometheus.GaugeValue,
		func(h StoreHealth) float64 { return float64(h.Keys) }),
}

// Series of a distributed node (a Redis store, any arrangement).
var storeNode = []storeSeries{
	series("floodgate_node_evictions_total", "Keys evicted from this node's table to stay within its bound.", prometheus.CounterValue,
		func(h StoreHealth) float64 { return float64(h.Evictions) }),
	series("floodgate_store_deadline_misses_total", "Decisions whose store call missed the adaptive deadline below its ceiling and went to the failure policy.", prometheus.CounterValue,
		func(h StoreHealth) float64 { return float64(h.DeadlineMisses) }),
	series("floodgate_store_deadline_seconds", "The adaptive deadline a decision's store call gets now.", prometheus.GaugeValue,
		func(h StoreHealth) float64 { return h.Deadline.Seconds() }),
	series("floodgate_nodes", "Nodes this node computes its shares of the limits with (split, and failure: local): the live count, or arrangement.nodes.", prometheus.GaugeValue,
		func(h StoreHealth) float64 { return float64(h.Nodes) }),
}

// Series of a node that counts the live nodes (arrangement.nodes: 0).
var storeRoster = []storeSeries{
	series("floodgate_roster_age_seconds", "Seconds since Redis last answered this node's heartbeat (the live count is that old); -1 before the first answer.", prometheus.GaugeValue,
		func(h StoreHealth) float64 {
			if h.RosterAge < 0 {
				return -1
			}
			return h.RosterAge.Seconds()
		}),
	series("floodgate_heartbeat_errors_total", "Heartbeats to Redis that failed (the node kept its last count).", prometheus.CounterValue,
		func(h StoreHealth) float64 { return float64(h.HeartbeatErrors) }),
}

// Series of the queue of counts not yet pushed to the shared store: the
// delayed arrangement pushes every count through it, the centralized one
// the counts it took while Redis was unreachable.
var storeQueue = []storeSeries{
	series("floodgate_sync_pending", "Local counts not yet pushed to the shared store.", prometheus.GaugeValue,
		func(h StoreHealth) float64 { return float64(h.Pending) }),
	series("floodgate_sync_pending_bytes", "Bytes of the queue of counts not yet pushed to the shared store.", prometheus.GaugeValue,
		func(h StoreHealth) float64 { return float64(h.PendingBytes) }),
	series("floodgate_sync_resends_total", "Pushes to the shared store sent again under their identity after a failure or timeout (applied at most once).", prometheus.CounterValue,
		func(h StoreHealth) float64 { return float64(h.SyncResends) }),
	series("floodgate_sync_merged_total", "Accepted requests merged into their key's last pending event because the pending queue was full.", prometheus.CounterValue,
		func(h StoreHealth) float64 { return float64(h.SyncMerged) }),
	series("floodgate_sync_dropped_total", "Accepted requests whose count was dropped: it waited on its key for room in the full pending queue and the key was evicted first (never reaches the shared store).", prometheus.CounterValue,
		func(h StoreHealth) float64 { return float64(h.SyncDropped) }),
	series("floodgate_sync_deferred_total", "Accepted requests that found the pending queue full with nothing of their key queued: their count waited on the key's entry until a sync had room.", prometheus.CounterValue,
		func(h StoreHealth) float64 { return float64(h.SyncDeferred) }),
}

// Series of the delayed arrangement's periodic exchange.
var storeDelayed = []storeSeries{
	series("floodgate_sync_lag_seconds", "Delayed synchronization: seconds since the last successful exchange with the shared store.", prometheus.GaugeValue,
		func(h StoreHealth) float64 { return h.SyncLag.Seconds() }),
	series("floodgate_sync_orphaned_total", "Accepted requests of keys seen once that the full table evicted before their count was pushed; they are pushed later from the orphan list (not dropped).", prometheus.CounterValue,
		func(h StoreHealth) float64 { return float64(h.SyncOrphaned) }),
	series("floodgate_sync_kept_views_total", "Pulled states below what this node knows it counted (the shared store lost data); the node kept its own view.", prometheus.CounterValue,
		func(h StoreHealth) float64 { return float64(h.SyncKeptViews) }),
	series("floodgate_sync_repush_skipped_total", "Keys not pushed again after the shared store lost its data (counted once, or beyond the bound).", prometheus.CounterValue,
		func(h StoreHealth) float64 { return float64(h.SyncRepushSkipped) }),
	series("floodgate_sync_retain_forgotten_total", "Evicted keys whose pushed counts were dropped from the bounded list kept to push them again if the shared store loses its data.", prometheus.CounterValue,
		func(h StoreHealth) float64 { return float64(h.SyncRetainForgotten) }),
	series("floodgate_sync_repush_pending", "Keys still to be pushed again to the shared store after it lost its data.", prometheus.GaugeValue,
		func(h StoreHealth) float64 { return float64(h.SyncRepushPending) }),
	series("floodgate_sync_late_answers_total", "Syncs that missed their deadline and answered later: the shared store was slow, not down (they keep the circuit breaker closed).", prometheus.CounterValue,
		func(h StoreHealth) float64 { return float64(h.SyncLateAnswers) }),
	series("floodgate_node_summary_charged_total", "Keys this node's eviction summary charged when they were created (returning evicted keys, and new keys whose cells they share).", prometheus.CounterValue,
		func(h StoreHealth) float64 { return float64(h.SummaryCharged) }),
	series("floodgate_node_summary_reads_total", "Reads of the shared store's count made for requests that only a key's eviction-summary charge rejected.", prometheus.CounterValue,
		func(h StoreHealth) float64 { return float64(h.SummaryReads) }),
	series("floodgate_node_summary_settled_total", "Eviction-summary charges ended by a read of the shared store's count, the request then decided on that count.", prometheus.CounterValue,
		func(h StoreHealth) float64 { return float64(h.SummarySettled) }),
}

var breakerStateDesc = prometheus.NewDesc("floodgate_store_breaker_state",
	"Circuit breaker in front of the shared store: 1 for the state it is in (closed, half_open or open), 0 for the others.", []string{"state"}, nil)

// Breaker states as the state label spells them.
var breakerStates = []struct{ health, label string }{
	{BreakerClosed, "closed"}, {BreakerHalfOpen, "half_open"}, {BreakerOpen, "open"},
}

// storeCollector exports the store's figures, read once per scrape, and
// only the series that mean something for the store and arrangement in
// use: a memory store has no breaker, no node and no sync queue.
type storeCollector struct {
	health func() StoreHealth
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, group := range [][]storeSeries{storeAlways, storeNode, storeRoster, storeQueue, storeDelayed} {
		for _, s := range group {
			ch <- s.desc
		}
	}
	ch <- breakerStateDesc
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	h := c.health()
	emit := func(group []storeSeries) {
		for _, s := range group {
			ch <- prometheus.MustNewConstMetric(s.desc, s.typ, s.value(h))
		}
	}
	emit(storeAlways)
	if h.Breaker != "" {
		for _, st := range breakerStates {
			ch <- prometheus.MustNewConstMetric(breakerStateDesc, prometheus.GaugeValue, boolFloat(h.Breaker == st.health), st.label)
		}
	}
	switch h.Arrangement {
	case "delayed":
		emit(storeNode)
		emit(storeQueue)
		emit(storeDelayed)
	case "centralized":
		emit(storeNode)
		emit(storeQueue)
	case "split":
		emit(storeNode)
	}
	if h.NodesLive {
		emit(storeRoster)
	}
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// buildInfo is floodgate_build_info: 1, labelled with the module version,
// the Go version and the source revision the binary was built from.
func buildInfo() prometheus.Collector {
	version, revision := "unknown", "unknown"
	if info, ok := debug.ReadBuildInfo(); ok {
		if info.Main.Version != "" {
			version = info.Main.Version
		}
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				revision = s.Value
			}
		}
	}
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "floodgate_build_info",
		Help:        "1, labelled with the version, the Go version and the source revision of the running binary.",
		ConstLabels: prometheus.Labels{"version": version, "goversion": runtime.Version(), "revision": revision},
	}, func() float64 { return 1 })
}
