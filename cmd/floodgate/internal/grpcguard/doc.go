// Package grpcguard defends the gRPC listener against HTTP/2 abuse that
// gRPC's own bounds let through.
//
// Resets watches the HTTP/2 frames on every connection (frame headers only,
// never the HPACK blocks) and keeps, per client address, a budget of
// stream resets: a client that cancels its streams much more often than it
// lets them finish ("rapid reset") has its connections sent GOAWAY
// (ENHANCE_YOUR_CALM) and closed, and its new connections refused for a
// cooldown.
//
// Admission bounds the calls the server holds at once: in flight, and
// waiting for their request message (streams opened with HEADERS whose
// message does not come), in all and per client address, and cancels a
// call whose request message has not arrived within a deadline.
package grpcguard
