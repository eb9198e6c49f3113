// Package httplimit puts Floodgate in front of net/http handlers and clients:
// a middleware that limits incoming requests and answers over-limit ones
// with 429 and the RateLimit headers, the client-address logic that honours
// forwarding headers only from trusted proxies, and an http.RoundTripper
// that throttles outgoing calls.
package httplimit
