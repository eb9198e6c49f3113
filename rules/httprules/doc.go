// Package httprules puts a rule engine (package rules) in front of net/http
// handlers and clients: a middleware that describes every request as
// descriptors (client address, path, method, headers, values of your own),
// checks them against the rules and answers over-limit requests with 429,
// the rate-limit header fields and a problem body; and an http.RoundTripper
// that holds outgoing calls to the rules. For one limiter and a key, with
// no rule file, use package httplimit, which links no rule engine.
package httprules
