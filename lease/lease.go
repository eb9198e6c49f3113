// Package lease identifies the leases under which a concurrency limit holds
// a request's units: only the holder of a lease's ID can give its units
// back, once, and a lease not released expires by itself.
//
// An ID is chosen at random by the limiter when a request is allowed (New),
// travels as 24 lower-case hex digits (ID.String, Parse) and is handed to a
// store that holds leases (store.Leaser) and through it to the concurrency
// algorithm (algorithm.Leaser).
package lease

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"time"
)

// ID identifies a lease: two random halves of Bits bits each (the Redis
// script holds every state word as a double, exact below 2^53). The zero ID
// is no lease.
type ID struct{ Hi, Lo int64 }

// Bits is the width of each half of an ID.
const Bits = 48

// DefaultTTL is how long a lease of a concurrency limit without a window
// lasts when it is not released; with a window, a lease lasts the window.
const DefaultTTL = time.Minute

// MaxPerKey is the most leases one key of a concurrency limit holds at
// once: a request that would take one more is rejected as over the limit
// until one is released or expires.
const MaxPerKey = 1024

// ErrInvalid is returned by a store asked to acquire under an ID that is
// not Valid.
var ErrInvalid = errors.New("lease: invalid lease id")

// ErrSyntax is returned by Parse for text that is no lease.
var ErrSyntax = errors.New("a lease is 24 lower-case hex digits, as acquiring returned it")

// New returns a random ID from crypto/rand: 96 bits a caller cannot guess.
func New() ID {
	var b [16]byte
	for {
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
		id := ID{
			Hi: int64(binary.LittleEndian.Uint64(b[:8]) >> (64 - Bits)),
			Lo: int64(binary.LittleEndian.Uint64(b[8:]) >> (64 - Bits)),
		}
		if id.Valid() {
			return id
		}
	}
}

// Valid reports whether id could have come from New: not zero, and each
// half within Bits bits.
func (id ID) Valid() bool {
	const top = 1 << Bits
	return id != ID{} && id.Hi >= 0 && id.Hi < top && id.Lo >= 0 && id.Lo < top
}

// hexLen is the length of an ID's text: each half in 12 hex digits.
const hexLen = 2 * Bits / 4

// String returns id as 24 lower-case hex digits, the form Parse reads.
func (id ID) String() string {
	const digits = "0123456789abcdef"
	var b [hexLen]byte
	for i, v := range [2]int64{id.Hi, id.Lo} {
		for j := hexLen/2 - 1; j >= 0; j-- {
			b[i*hexLen/2+j] = digits[v&15]
			v >>= 4
		}
	}
	return string(b[:])
}

// Parse reads an ID written by ID.String.
func Parse(s string) (ID, error) {
	if len(s) != hexLen {
		return ID{}, ErrSyntax
	}
	var h [2]int64
	for i := range hexLen {
		c := s[i]
		var v byte
		switch {
		case c >= '0' && c <= '9':
			v = c - '0'
		case c >= 'a' && c <= 'f':
			v = c - 'a' + 10
		default:
			return ID{}, ErrSyntax
		}
		h[i/(hexLen/2)] = h[i/(hexLen/2)]<<4 | int64(v)
	}
	id := ID{Hi: h[0], Lo: h[1]}
	if !id.Valid() {
		return ID{}, ErrSyntax
	}
	return id, nil
}

// Quota leases
//
// A quota lease is a part of a key's allowance that a client takes with one
// call and spends without calling (package rlsclient's leases, the server's
// RLQS service). The key's limit holds the units under the lease's ID until
// the holder reports them spent or gives them back; an Op is one such call.

// Op is one operation of a quota lease holder on a key.
type Op struct {
	// ID names the lease; it must be Valid.
	ID ID
	// Seq orders the holder's operations on the lease, from 1: an operation
	// whose Seq is not above the last one applied is a repeat (a retry after
	// a lost reply) and changes nothing. At most MaxSeq.
	Seq int64
	// Spent is how many units the holder spent since its previous
	// operation. They are counted now (at most the limit) and leave what
	// the lease holds.
	Spent int64
	// Target is how many units the holder would like to hold after the
	// operation: the lease is topped up towards it as far as its share
	// allows (it never loses units it holds). 0 gives back what is left and
	// ends the lease.
	Target int64
}

// MaxSeq is the largest Op.Seq (the Redis script keeps seq*2+1 below 2^53).
const MaxSeq = 1<<51 - 1

// Held is what a key holds for a quota lease after an Op.
type Held struct {
	// Units is how many units the lease holds, Granted how many the Op
	// added.
	Units, Granted int64
	// TTL is how long from the Op the units stay held unless renewed: an
	// unrenewed lease is then counted in full. 0 when it holds nothing.
	TTL time.Duration
	// Repeat reports an Op already applied (sent again after a lost reply).
	Repeat bool
}
