package server

import (
	"github.com/floodgate-dev/floodgate/gateway"
	"github.com/prometheus/client_golang/prometheus"
)

// gatewayCollector exports the gateway's upstream connection counts (in a
// steady load the opened counter stays near the number of clients, not
// the number of requests, when connections are reused) and the requests
// each upstream did not answer.
type gatewayCollector struct{ gw *gateway.Gateway }

var (
	upstreamOpenedDesc = prometheus.NewDesc("floodgate_gateway_upstream_connections_opened_total",
		"Connections the gateway dialed to a route's upstream since it started.", []string{"route", "upstream"}, nil)
	upstreamOpenDesc = prometheus.NewDesc("floodgate_gateway_upstream_connections_open",
		"Connections to a route's upstream open now (in use or idle).", []string{"route", "upstream"}, nil)
	upstreamErrorsDesc = prometheus.NewDesc("floodgate_gateway_upstream_errors_total",
		"Requests a route's upstream did not answer, by cause: upstream_failed (refused, reset or timed out; the gateway answered 502) "+
			"or client_canceled (the client went away first).", []string{"route", "upstream", "cause"}, nil)
)

func (c gatewayCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- upstreamOpenedDesc
	ch <- upstreamOpenDesc
	ch <- upstreamErrorsDesc
}

func (c gatewayCollector) Collect(ch chan<- prometheus.Metric) {
	for _, u := range c.gw.Upstreams() {
		ch <- prometheus.MustNewConstMetric(upstreamOpenedDesc, prometheus.CounterValue, float64(u.Opened), u.Prefix, u.Upstream)
		ch <- prometheus.MustNewConstMetric(upstreamOpenDesc, prometheus.GaugeValue, float64(u.Open), u.Prefix, u.Upstream)
		ch <- prometheus.MustNewConstMetric(upstreamErrorsDesc, prometheus.CounterValue, float64(u.Failed), u.Prefix, u.Upstream, "upstream_failed")
		ch <- prometheus.MustNewConstMetric(upstreamErrorsDesc, prometheus.CounterValue, float64(u.Canceled), u.Prefix, u.Upstream, "client_canceled")
	}
}
