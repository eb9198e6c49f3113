package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"strings"
)

// Counter keys come from request bytes, and some of those bytes are
// secrets (API keys, tokens, cookies). Wherever the server shows a key (the
// status page and status.json's top_rejected, the log) it shows every entry's
// name but replaces the value of a sensitive entry with a short digest, as
// in header:x-api-key=(masked:1b4f0e98), unless admin.show_key_values is
// set. The digest is the first 8 hex digits of the SHA-256 of the value, so
// an operator can tell keys apart and check a suspect key without the key
// being shown.

// sensitiveWords mark an entry whose value is masked, besides every entry
// taken from a request header (header:<name>).
var sensitiveWords = []string{"key", "token", "auth", "secret", "pass", "session", "cookie", "cred", "sig"}

// sensitiveEntry reports whether the values of the entry called name are
// masked.
func sensitiveEntry(name string) bool {
	n := strings.ToLower(name)
	if strings.HasPrefix(n, "header:") {
		return true
	}
	for _, w := range sensitiveWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// maskValue is how a masked value is shown.
func maskValue(v string) string {
	sum := sha256.Sum256([]byte(v))
	return "(masked:" + hex.EncodeToString(sum[:4]) + ")"
}

// maskKey masks the values of sensitive entries in a counter key of the
// form domain|rule|name=value|name=value (see package rules), in which '\',
// '|' and '=' inside parts are escaped with a backslash.
func maskKey(k string) string {
	parts := splitUnescaped(k, '|')
	if len(parts) < 3 {
		return k
	}
	changed := false
	for i := 2; i < len(parts); i++ {
		eq := indexUnescaped(parts[i], '=')
		if eq < 0 {
			continue
		}
		if name := parts[i][:eq]; sensitiveEntry(unescape(name)) {
			parts[i] = name + "=" + maskValue(unescape(parts[i][eq+1:]))
			changed = true
		}
	}
	if !changed {
		return k
	}
	return strings.Join(parts, "|")
}

// splitUnescaped splits s at each sep not preceded by a backslash escape.
func splitUnescaped(s string, sep byte) []string {
	var parts []string
	start := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case sep:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}

// indexUnescaped returns the index of the first unescaped c in s, or -1.
func indexUnescaped(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case c:
			return i
		}
	}
	return -1
}

func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// maskingHandler masks counter keys in log records: the string attribute
// "key" that the shadow-mode log (and others) carry.
type maskingHandler struct{ slog.Handler }

func (h maskingHandler) Handle(ctx context.Context, r slog.Record) error {
	masked := false
	r.Attrs(func(a slog.Attr) bool {
		masked = masked || (a.Key == "key" && a.Value.Kind() == slog.KindString)
		return !masked
	})
	if !masked {
		return h.Handler.Handle(ctx, r)
	}
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "key" && a.Value.Kind() == slog.KindString {
			a.Value = slog.StringValue(maskKey(a.Value.String()))
		}
		out.AddAttrs(a)
		return true
	})
	return h.Handler.Handle(ctx, out)
}

func (h maskingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return maskingHandler{h.Handler.WithAttrs(as)}
}

func (h maskingHandler) WithGroup(name string) slog.Handler {
	return maskingHandler{h.Handler.WithGroup(name)}
}
