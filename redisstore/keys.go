package redisstore

import (
	"crypto/sha256"
	"encoding/hex"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
)

// specFor returns the script spec of a, building and caching it.
func (s *Store) specFor(a algorithm.Algorithm) (*spec, error) {
	if a == nil {
		return nil, store.ErrNoAlgorithm
	}
	if g, ok := a.(gubernatorAlg); ok {
		return gubernatorSpec(g, s.slack), nil
	}
	c := a.Config()
	s.specMu.RLock()
	e, ok := s.specs[c]
	s.specMu.RUnlock()
	if !ok {
		e.sp, e.err = newSpec(a, s.slack)
		s.specMu.Lock()
		if s.specs == nil {
			s.specs = make(map[algorithm.Config]specEntry)
		}
		s.specs[c] = e
		s.specMu.Unlock()
	}
	return e.sp, e.err
}

// specEntry is a cached spec, or the reason an algorithm has none.
type specEntry struct {
	sp  *spec
	err error
}

// Key returns the Redis key that holds the state of key under a's limit.
func (s *Store) Key(a algorithm.Algorithm, key string) (string, error) {
	sp, err := s.specFor(a)
	if err != nil {
		return "", err
	}
	return s.key(sp, key), nil
}

func (s *Store) key(sp *spec, key string) string {
	var b strings.Builder
	b.Grow(len(s.prefix) + len(sp.tag) + 5 + len(key))
	b.WriteString(s.prefix)
	b.WriteString(":{")
	switch {
	case sp.perKey:
		b.WriteString(keyTag(key))
	case sp.group != "":
		b.WriteString(sp.group)
		b.WriteString("}:")
		b.WriteString(sp.tag)
		b.WriteByte(':')
		writeKey(&b, key)
		return b.String()
	default:
		b.WriteString(sp.tag)
	}
	if s.spread > 1 && !sp.perKey {
		h := fnv.New32a()
		h.Write([]byte(key))
		b.WriteByte('.')
		b.WriteString(strconv.FormatUint(uint64(h.Sum32()%uint32(s.spread)), 10))
	}
	b.WriteString("}:")
	writeKey(&b, key)
	return b.String()
}

// writeKey writes key escaped: bytes outside [A-Za-z0-9-_.] become %XX. An
// escaped key longer than maxPlainKey is written as '#' and the hex SHA-256
// of key instead. '%' and '#' are always escaped, so the two forms never
// meet and distinct keys give distinct names.
func writeKey(b *strings.Builder, key string) {
	n := 0
	for i := 0; i < len(key); i++ {
		if plain(key[i]) {
			n++
		} else {
			n += 3
		}
	}
	if n > maxPlainKey {
		h := sha256.Sum256([]byte(key))
		b.WriteByte('#')
		b.WriteString(hex.EncodeToString(h[:]))
		return
	}
	const hexdigits = "0123456789ABCDEF"
	for i := 0; i < len(key); i++ {
		c := key[i]
		if plain(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexdigits[c>>4])
		b.WriteByte(hexdigits[c&15])
	}
}

func plain(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '_' || c == '.'
}

// now returns the script's time argument: the caller's time in whole
// microseconds, or "" for the server's clock.
func (s *Store) now(now int64) string {
	if !s.clientTime {
		return ""
	}
	return itoa(floorDiv(now, usec))
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// KeepsCounts reports whether the store keeps each key's count when a's
// limit changes to another of the same algorithm.Config.Identity
// (store.CountKeeper): for the windows, the buckets and bounded-log;
// sliding-log and concurrency keep a counter per limit.
func (s *Store) KeepsCounts(a algorithm.Algorithm) bool { return converts(a.Config()) }
