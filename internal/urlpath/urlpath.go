// Package urlpath turns a request's URL path into the one spelling the
// gateway both limits and forwards, so that a rule on /api/login cannot be
// passed by asking for //api/login, /api/./login or /api/%2e/login, which
// upstreams such as nginx serve as /api/login.
//
// Canonical removes dot segments (RFC 3986 section 5.2.4, after decoding
// %2e), merges repeated slashes, decodes percent-escapes of unreserved
// characters (letters, digits, - . _ ~) and writes every other escape in
// upper case. What upstreams disagree on — an encoded slash, ';'
// parameters, letter case, a trailing slash — follows a Policy. A path that
// cannot be given one meaning (a malformed escape, a backslash, a control
// character, a segment ending in '.' or a space, a double-encoded escape
// such as %256c, or a spelling the policy refuses) is an error, which the
// gateway answers with 400.
package urlpath

import (
	"bytes"
	"fmt"
	"net/url"
	"strings"
)

// EncodedSlash says what %2F in a path means.
type EncodedSlash uint8

const (
	// RefuseEncodedSlash refuses a path with %2F: upstreams disagree on
	// whether it separates segments (nginx decodes it, Apache and Tomcat
	// refuse it by default).
	RefuseEncodedSlash EncodedSlash = iota
	// DecodeEncodedSlash reads %2F as '/' before dot segments are removed
	// and slashes merged.
	DecodeEncodedSlash
)

// Semicolon says what ';' in a path segment means.
type Semicolon uint8

const (
	// RefuseSemicolon refuses a path with ';' or %3B: Tomcat, Jetty and
	// Spring cut a segment's ;parameters off (/api/login;x is /api/login,
	// /api/..;/x is /x), nginx does not.
	RefuseSemicolon Semicolon = iota
	// StripSemicolon cuts each segment at its first ';', as servlet
	// containers do, before dot segments are removed.
	StripSemicolon
	// KeepSemicolon treats ';' as an ordinary character.
	KeepSemicolon
)

// Case says whether letter case matters.
type Case uint8

const (
	// CaseSensitive keeps letters as sent.
	CaseSensitive Case = iota
	// LowerCase turns ASCII letters to lower case, for upstreams that
	// ignore case (IIS, case-insensitive routers).
	LowerCase
)

// TrailingSlash says whether /a/ and /a are one path.
type TrailingSlash uint8

const (
	// KeepTrailingSlash keeps a trailing slash: /a/ and /a are two paths,
	// as for nginx and Go's ServeMux.
	KeepTrailingSlash TrailingSlash = iota
	// StripTrailingSlash removes it, for upstreams that serve /a/ as /a
	// (Express and Rails by default).
	StripTrailingSlash
)

// Compatibility says what a character means that Unicode compatibility
// normalization (NFKC) turns into ASCII: full-width letters (/api/ｌｏｇｉｎ),
// ligatures, super- and subscripts, enclosed and mathematical letters.
type Compatibility uint8

const (
	// RefuseCompatibility refuses a path holding such a character: an
	// upstream that normalises paths with NFKC (some frameworks, IIS's
	// "best fit" mapping) would read another path than the rules saw.
	RefuseCompatibility Compatibility = iota
	// KeepCompatibility treats them as ordinary characters, for upstreams
	// that do not normalise (nginx, Go's ServeMux), where /api/ｌｏｇｉｎ is
	// a page of its own.
	KeepCompatibility
)

// Policy says how a route treats the spellings upstreams disagree on. The
// zero value is the safe default: refuse %2F, refuse ';', keep case, keep
// a trailing slash, refuse characters NFKC turns into ASCII.
type Policy struct {
	EncodedSlash  EncodedSlash
	Semicolon     Semicolon
	Case          Case
	TrailingSlash TrailingSlash
	Compatibility Compatibility
}

// ParsePolicy reads a Policy from the words of the configuration; an empty
// word takes the default.
func ParsePolicy(encodedSlash, semicolon, letterCase, trailingSlash, compatibility string) (Policy, error) {
	var p Policy
	switch compatibility {
	case "", "refuse":
	case "keep":
		p.Compatibility = KeepCompatibility
	default:
		return p, fmt.Errorf("compatibility %q: want refuse or keep", compatibility)
	}
	switch encodedSlash {
	case "", "refuse":
	case "decode":
		p.EncodedSlash = DecodeEncodedSlash
	default:
		return p, fmt.Errorf("encoded_slash %q: want refuse or decode", encodedSlash)
	}
	switch semicolon {
	case "", "refuse":
	case "strip":
		p.Semicolon = StripSemicolon
	case "keep":
		p.Semicolon = KeepSemicolon
	default:
		return p, fmt.Errorf("semicolon %q: want refuse, strip or keep", semicolon)
	}
	switch letterCase {
	case "", "sensitive":
	case "lower":
		p.Case = LowerCase
	default:
		return p, fmt.Errorf("case %q: want sensitive or lower", letterCase)
	}
	switch trailingSlash {
	case "", "keep":
	case "strip":
		p.TrailingSlash = StripTrailingSlash
	default:
		return p, fmt.Errorf("trailing_slash %q: want keep or strip", trailingSlash)
	}
	return p, nil
}

// Canonical returns the canonical spelling of escaped, a URL path as sent
// (percent-escapes and all, as url.URL.EscapedPath gives it): escaped for
// forwarding, and decoded for the rules. It starts with '/', has no empty,
// "." or ".." segment, and Canonical of it is itself. A path it cannot give
// one meaning is an error saying why.
func Canonical(escaped string, p Policy) (esc, decoded string, err error) {
	if escaped == "" {
		return "/", "/", nil
	}
	if escaped[0] != '/' {
		return "", "", fmt.Errorf("path %q does not start with /", clip(escaped))
	}
	if isCanonical(escaped, p) {
		return escaped, escaped, nil
	}
	if p.EncodedSlash == DecodeEncodedSlash {
		escaped = decodeSlashes(escaped)
	}
	out := make([]byte, 0, len(escaped))
	trailing, hasEscape := false, false
	rest := escaped[1:]
	for {
		seg, more := rest, false
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			seg, rest, more = rest[:i], rest[i+1:], true
		}
		if p.Semicolon == StripSemicolon {
			if i := strings.IndexByte(seg, ';'); i >= 0 {
				seg = seg[:i]
			}
		}
		start := len(out)
		out = append(out, '/')
		var esc bool
		if out, esc, err = appendSegment(out, seg, p); err != nil {
			return "", "", err
		}
		hasEscape = hasEscape || esc
		switch n := len(out) - start - 1; {
		case n == 0, n == 1 && out[start+1] == '.':
			out = out[:start]
			trailing = true
		case n == 2 && out[start+1] == '.' && out[start+2] == '.':
			out = out[:start]
			out = out[:max(bytes.LastIndexByte(out, '/'), 0)]
			trailing = true
		case out[len(out)-1] == '.' || bytes.HasSuffix(out[start:], []byte("%20")):
			// Windows and IIS, and servers that trim names, drop a
			// segment's trailing dots and spaces: /api/login. and
			// /api/login%20 are /api/login there and other paths elsewhere.
			return "", "", fmt.Errorf("path segment %q ends with a dot or a space, which upstreams disagree on", clip(seg))
		default:
			trailing = false
		}
		if !more {
			break
		}
	}
	if len(out) == 0 || trailing && p.TrailingSlash == KeepTrailingSlash {
		out = append(out, '/')
	}
	esc = string(out)
	if !hasEscape {
		return esc, esc, nil
	}
	decoded, err = url.PathUnescape(esc)
	if err != nil { // not reached: every escape written is well formed
		return "", "", fmt.Errorf("path %q: %v", clip(esc), err)
	}
	// %25 and two hex digits (%256c, or %25%36%63): the decoded path holds
	// an escape, which an upstream that decodes twice reads as its
	// character (l).
	if doubleEncoded(decoded) {
		return "", "", fmt.Errorf("path %q has a double-encoded escape (%%25 and two hex digits), which upstreams that decode twice read as another character", clip(esc))
	}
	if p.Compatibility == RefuseCompatibility {
		if r, ok := compatRune(decoded); ok {
			return "", "", fmt.Errorf("path %q has %U (%q), which Unicode compatibility normalization (NFKC) turns into ASCII, "+
				"so upstreams that normalise read another path", clip(decoded), r, r)
		}
	}
	return esc, decoded, nil
}

// doubleEncoded reports whether s, a decoded path, holds '%' and two hex
// digits.
func doubleEncoded(s string) bool {
	for i := 0; i+2 < len(s); i++ {
		if s[i] == '%' && ishex(s[i+1]) && ishex(s[i+2]) {
			return true
		}
	}
	return false
}

// isCanonical reports whether s (starting with '/') is already canonical
// under p, without allocating: the common case.
func isCanonical(s string, p Policy) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '/':
			if i+1 < len(s) && (s[i+1] == '/' || s[i+1] == '.') {
				return false // an empty segment, or one that may be a dot segment
			}
		case c == '.':
			if i+1 == len(s) || s[i+1] == '/' {
				return false // a segment ending in a dot
			}
		case c == '%', c == '\\', c < 0x21, c >= 0x7f:
			return false
		case c == ';':
			if p.Semicolon != KeepSemicolon {
				return false
			}
		case 'A' <= c && c <= 'Z':
			if p.Case == LowerCase {
				return false
			}
		case !pchar(c):
			return false
		}
	}
	return p.TrailingSlash == KeepTrailingSlash || len(s) == 1 || s[len(s)-1] != '/'
}

// decodeSlashes replaces every %2F in s by '/'.
func decodeSlashes(s string) string {
	if !strings.Contains(s, "%2F") && !strings.Contains(s, "%2f") {
		return s
	}
	return strings.NewReplacer("%2F", "/", "%2f", "/").Replace(s)
}

// appendSegment appends the canonical form of one path segment to out,
// and reports whether it wrote a percent-escape.
func appendSegment(out []byte, seg string, p Policy) ([]byte, bool, error) {
	escaped := false
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if c == '%' {
			if i+2 >= len(seg) || !ishex(seg[i+1]) || !ishex(seg[i+2]) {
				return nil, false, fmt.Errorf("path segment %q has a malformed percent-escape", clip(seg))
			}
			c = unhex(seg[i+1])<<4 | unhex(seg[i+2])
			i += 2
			switch {
			case c == '/':
				return nil, false, fmt.Errorf("path segment %q has an encoded slash (%%2F), which this route refuses", clip(seg))
			case c == ';' && p.Semicolon == RefuseSemicolon:
				return nil, false, fmt.Errorf("path segment %q has an encoded ';' (%%3B), which this route refuses", clip(seg))
			case unreserved(c):
				out = append(out, lower(c, p))
			default:
				if err := forbidden(c, seg); err != nil {
					return nil, false, err
				}
				out = append(out, '%', upperhex[c>>4], upperhex[c&15])
				escaped = true
			}
			continue
		}
		if err := forbidden(c, seg); err != nil {
			return nil, false, err
		}
		switch {
		case c == ';' && p.Semicolon == RefuseSemicolon:
			return nil, false, fmt.Errorf("path segment %q has a ';', which this route refuses (upstreams disagree on whether it starts parameters)", clip(seg))
		case pchar(c):
			out = append(out, lower(c, p))
		default:
			out = append(out, '%', upperhex[c>>4], upperhex[c&15])
			escaped = true
		}
	}
	return out, escaped, nil
}

// forbidden refuses the bytes no route accepts, raw or escaped: a
// backslash (IIS and some routers read it as '/') and control characters.
func forbidden(c byte, seg string) error {
	switch {
	case c == '\\':
		return fmt.Errorf("path segment %q has a backslash, which upstreams disagree on", clip(seg))
	case c < 0x20 || c == 0x7f:
		return fmt.Errorf("path segment %q has a control character (0x%02x)", clip(seg), c)
	}
	return nil
}

func lower(c byte, p Policy) byte {
	if p.Case == LowerCase && 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// unreserved reports whether c is an unreserved character of RFC 3986: its
// percent-escape means the character itself.
func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// pchar reports whether c may appear unescaped in a path segment (RFC 3986
// pchar without pct-encoded).
func pchar(c byte) bool {
	if unreserved(c) {
		return true
	}
	switch c {
	case '!', '$', '&', '\'', '(', ')', '*', '+', ',', ';', '=', ':', '@':
		return true
	}
	return false
}

const upperhex = "0123456789ABCDEF"

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
