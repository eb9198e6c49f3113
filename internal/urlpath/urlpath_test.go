package urlpath

import (
	"net/url"
	"strings"
	"testing"
)

func TestCanonical(t *testing.T) {
	for _, c := range []struct {
		in        string
		p         Policy
		esc, dec  string
		errSubstr string
	}{
		{in: "/api/login", esc: "/api/login"},
		{in: "", esc: "/"},
		{in: "/", esc: "/"},
		{in: "//api/login", esc: "/api/login"},
		{in: "/api//login", esc: "/api/login"},
		{in: "/api/./login", esc: "/api/login"},
		{in: "/./api/login", esc: "/api/login"},
		{in: "/api/%2e/login", esc: "/api/login"},
		{in: "/api/%2E%2e/api/login", esc: "/api/login"},
		{in: "/api/foo/../login", esc: "/api/login"},
		{in: "/api/foo/.%2e/login", esc: "/api/login"},
		{in: "/../../api/login", esc: "/api/login"},
		{in: "/api//admin/x", esc: "/api/admin/x"},
		{in: "/api/./admin/x", esc: "/api/admin/x"},
		{in: "/api/login/", esc: "/api/login/"},
		{in: "/api/login/.", esc: "/api/login/"},
		{in: "/api/login/x/..", esc: "/api/login/"},
		{in: "/api/login//", esc: "/api/login/"},
		{in: "/api/login/", p: Policy{TrailingSlash: StripTrailingSlash}, esc: "/api/login"},
		{in: "/", p: Policy{TrailingSlash: StripTrailingSlash}, esc: "/"},
		{in: "/API/Login", esc: "/API/Login"},
		{in: "/API/Login", p: Policy{Case: LowerCase}, esc: "/api/login"},
		{in: "/%41PI/login", p: Policy{Case: LowerCase}, esc: "/api/login"},
		{in: "/%61pi/%7euser", esc: "/api/~user"},
		{in: "/a%20b/%c3%a9", esc: "/a%20b/%C3%A9", dec: "/a b/é"},
		{in: "/a%25b", esc: "/a%25b", dec: "/a%b"},
		{in: "/a b", esc: "/a%20b", dec: "/a b"},
		{in: "/.well-known/x", esc: "/.well-known/x"},
		{in: "/api/login;x", errSubstr: "';'"},
		{in: "/api/login%3bx", errSubstr: "%3B"},
		{in: "/api/login;x", p: Policy{Semicolon: StripSemicolon}, esc: "/api/login"},
		{in: "/api/..;/admin", p: Policy{Semicolon: StripSemicolon}, esc: "/admin"},
		{in: "/api/login%3Bx", p: Policy{Semicolon: StripSemicolon}, esc: "/api/login%3Bx", dec: "/api/login;x"},
		{in: "/api/login;x", p: Policy{Semicolon: KeepSemicolon}, esc: "/api/login;x"},
		{in: "/api/..;/admin", p: Policy{Semicolon: KeepSemicolon}, esc: "/api/..;/admin"},
		{in: "/api%2Flogin", errSubstr: "%2F"},
		{in: "/api%2flogin", errSubstr: "%2F"},
		{in: "/api%2Flogin", p: Policy{EncodedSlash: DecodeEncodedSlash}, esc: "/api/login"},
		{in: "/x%2F..%2Fapi%2Flogin", p: Policy{EncodedSlash: DecodeEncodedSlash}, esc: "/api/login"},
		{in: "/api\\login", errSubstr: "backslash"},
		{in: "/api%5clogin", errSubstr: "backslash"},
		{in: "/api%00login", errSubstr: "control"},
		{in: "/api%0d%0alogin", errSubstr: "control"},
		{in: "/api%zzlogin", errSubstr: "malformed"},
		{in: "/api%2", errSubstr: "malformed"},
		{in: "/api%", errSubstr: "malformed"},
		{in: "*", errSubstr: "start with /"},
		// Trailing dots and spaces, which Windows and IIS drop.
		{in: "/api/login.", errSubstr: "ends with a dot or a space"},
		{in: "/api/login%2e", errSubstr: "ends with a dot or a space"},
		{in: "/api/login%2E%2E", errSubstr: "ends with a dot or a space"},
		{in: "/api/login...", errSubstr: "ends with a dot or a space"},
		{in: "/api/login./x", errSubstr: "ends with a dot or a space"},
		{in: "/api/login%20", errSubstr: "ends with a dot or a space"},
		{in: "/api/%20/login", errSubstr: "ends with a dot or a space"},
		{in: "/api/login.;x", p: Policy{Semicolon: StripSemicolon}, errSubstr: "ends with a dot or a space"},
		{in: "/v1.0/a.b/.well-known", esc: "/v1.0/a.b/.well-known"},
		// Double encoding, which upstreams that decode twice read as the
		// character.
		{in: "/api/%256cogin", errSubstr: "double-encoded"},
		{in: "/api/%25%36%63ogin", errSubstr: "double-encoded"},
		{in: "/api/%2525", errSubstr: "double-encoded"},
		{in: "/a%25zz", esc: "/a%25zz", dec: "/a%zz"},
		// Characters NFKC turns into ASCII: full-width letters and dots,
		// a ligature, a one-dot leader, the Kelvin sign.
		{in: "/api/%EF%BD%8C%EF%BD%8F%EF%BD%87%EF%BD%89%EF%BD%8E", errSubstr: "U+FF4C"},
		{in: "/api/\xef\xbd\x8cogin", errSubstr: "NFKC"},
		{in: "/api/%EF%BC%8E%EF%BC%8E/admin", errSubstr: "U+FF0E"},
		{in: "/api/%EF%AC%81le", errSubstr: "U+FB01"},
		{in: "/api/login%E2%80%A4", errSubstr: "U+2024"},
		{in: "/%E2%84%AA", errSubstr: "U+212A"},
		{in: "/api/%EF%BD%8C%EF%BD%8F%EF%BD%87%EF%BD%89%EF%BD%8E", p: Policy{Compatibility: KeepCompatibility},
			esc: "/api/%EF%BD%8C%EF%BD%8F%EF%BD%87%EF%BD%89%EF%BD%8E", dec: "/api/ｌｏｇｉｎ"},
		{in: "/caf%C3%A9/%E6%97%A5%E6%9C%AC", esc: "/caf%C3%A9/%E6%97%A5%E6%9C%AC", dec: "/café/日本"},
	} {
		t.Run(c.in, func(t *testing.T) {
			esc, dec, err := Canonical(c.in, c.p)
			if c.errSubstr != "" {
				if err == nil || !strings.Contains(err.Error(), c.errSubstr) {
					t.Fatalf("Canonical(%q) = %q, %v; want an error naming %s", c.in, esc, err, c.errSubstr)
				}
				return
			}
			want := c.dec
			if want == "" {
				want = c.esc
			}
			if err != nil || esc != c.esc || dec != want {
				t.Fatalf("Canonical(%q) = %q, %q, %v; want %q, %q", c.in, esc, dec, err, c.esc, want)
			}
		})
	}
}

func TestParsePolicy(t *testing.T) {
	p, err := ParsePolicy("decode", "strip", "lower", "strip", "keep")
	if err != nil || p != (Policy{DecodeEncodedSlash, StripSemicolon, LowerCase, StripTrailingSlash, KeepCompatibility}) {
		t.Fatalf("ParsePolicy: %+v, %v", p, err)
	}
	if p, err := ParsePolicy("", "", "", "", ""); err != nil || p != (Policy{}) {
		t.Fatalf("defaults: %+v, %v", p, err)
	}
	for _, bad := range [][5]string{{"keep", "", "", "", ""}, {"", "drop", "", "", ""}, {"", "", "upper", "", ""}, {"", "", "", "add", ""}, {"", "", "", "", "fold"}} {
		t.Run(strings.Join(bad[:], ","), func(t *testing.T) {
			if _, err := ParsePolicy(bad[0], bad[1], bad[2], bad[3], bad[4]); err == nil {
				t.Errorf("ParsePolicy(%q) accepted", bad)
			}
		})
	}
}

var policies = []Policy{
	{},
	{DecodeEncodedSlash, StripSemicolon, LowerCase, StripTrailingSlash, RefuseCompatibility},
	{RefuseEncodedSlash, KeepSemicolon, CaseSensitive, KeepTrailingSlash, KeepCompatibility},
	{DecodeEncodedSlash, KeepSemicolon, LowerCase, KeepTrailingSlash, KeepCompatibility},
}

// FuzzCanonical: under every policy Canonical never panics; what it
// returns starts with '/', has no empty, "." or ".." segment, no segment
// ending in a dot or a space, no escape once decoded, no character NFKC
// turns into ASCII unless the policy keeps them, decodes to the decoded
// form it gives, and is its own canonical form.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{"/api/login", "//api/login", "/api//login", "/api/./login", "/./api/login",
		"/api/%2e/login", "/api/foo/../login", "/API/login", "/api/login/", "/api/login;x", "/api/..;/x",
		"/a%2F..%2Fb", "/%c3%a9/%zz", "/a b/\xff", "/..", "/.%2e/", "/x/%2E%2E;/y", "/%3b", "",
		"/api/login.", "/api/login%20/x", "/api/%256cogin", "/api/%25%36%63", "/api/%EF%BD%8C", "/%E2%84%AA/k"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		for _, p := range policies {
			esc, dec, err := Canonical(in, p)
			if err != nil {
				continue
			}
			if !strings.HasPrefix(esc, "/") || !strings.HasPrefix(dec, "/") {
				t.Fatalf("%+v: Canonical(%q) = %q, %q: not starting with /", p, in, esc, dec)
			}
			for _, seg := range strings.Split(esc[1:], "/") {
				if seg == "." || seg == ".." || seg == "" && !strings.HasSuffix(esc, "/") {
					t.Fatalf("%+v: Canonical(%q) = %q has segment %q", p, in, esc, seg)
				}
			}
			if strings.Contains(esc, "//") {
				t.Fatalf("%+v: Canonical(%q) = %q has an empty segment", p, in, esc)
			}
			for _, seg := range strings.Split(dec[1:], "/") {
				if strings.HasSuffix(seg, ".") || strings.HasSuffix(seg, " ") {
					t.Fatalf("%+v: Canonical(%q) = %q has segment %q ending in a dot or space", p, in, dec, seg)
				}
			}
			if doubleEncoded(dec) {
				t.Fatalf("%+v: Canonical(%q) = %q decodes to an escape", p, in, dec)
			}
			if r, ok := compatRune(dec); ok && p.Compatibility == RefuseCompatibility {
				t.Fatalf("%+v: Canonical(%q) = %q holds %U", p, in, dec, r)
			}
			if d, err := url.PathUnescape(esc); err != nil || d != dec {
				t.Fatalf("%+v: Canonical(%q) = %q, %q; it decodes to %q, %v", p, in, esc, dec, d, err)
			}
			esc2, dec2, err := Canonical(esc, p)
			if err != nil || esc2 != esc || dec2 != dec {
				t.Fatalf("%+v: Canonical(%q) = %q, but Canonical of that = %q, %q, %v", p, in, esc, esc2, dec2, err)
			}
		}
	})
}

// BenchmarkCanonical: the common, already canonical path costs a scan and
// no allocation.
func BenchmarkCanonical(b *testing.B) {
	for _, in := range []string{"/api/v1/users/12345/orders", "/api//v1/./users/%7E12345/../orders"} {
		b.Run(in, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Canonical(in, Policy{})
			}
		})
	}
}
