// Package httplimit puts one Floodgate limiter in front of net/http
// handlers and clients: LimitBy, a middleware that decides each request by
// a key (the client address, a header, a function of your own) and answers
// over-limit ones with 429, the rate-limit header fields and a problem
// body; the client-address logic that honours forwarding headers only from
// trusted proxies; and LimiterTransport, an http.RoundTripper that holds
// outgoing calls to the limiter. It links no rule engine, YAML or regexp:
// the middleware and transport driven by a rule file are package
// rules/httprules.
package httplimit
