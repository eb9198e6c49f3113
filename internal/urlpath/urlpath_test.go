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
	p, err := ParsePolicy("decode", "strip", "lower", "strip")
	if err != nil || p != (Policy{DecodeEncodedSlash, StripSemicolon, LowerCase, StripTrailingSlash}) {
		t.Fatalf("ParsePolicy: %+v, %v", p, err)
	}
	if p, err := ParsePolicy("", "", "", ""); err != nil || p != (Policy{}) {
		t.Fatalf("defaults: %+v, %v", p, err)
	}
	for _, bad := range [][4]string{{"keep", "", "", ""}, {"", "drop", "", ""}, {"", "", "upper", ""}, {"", "", "", "add"}} {
		t.Run(strings.Join(bad[:], ","), func(t *testing.T) {
			if _, err := ParsePolicy(bad[0], bad[1], bad[2], bad[3]); err == nil {
				t.Errorf("ParsePolicy(%q) accepted", bad)
			}
		})
	}
}

var policies = []Policy{
	{},
	{DecodeEncodedSlash, StripSemicolon, LowerCase, StripTrailingSlash},
	{RefuseEncodedSlash, KeepSemicolon, CaseSensitive, KeepTrailingSlash},
	{DecodeEncodedSlash, KeepSemicolon, LowerCase, KeepTrailingSlash},
}

// FuzzCanonical: under every policy Canonical never panics; what it
// returns starts with '/', has no empty, "." or ".." segment, decodes to
// the decoded form it gives, and is its own canonical form.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{"/api/login", "//api/login", "/api//login", "/api/./login", "/./api/login",
		"/api/%2e/login", "/api/foo/../login", "/API/login", "/api/login/", "/api/login;x", "/api/..;/x",
		"/a%2F..%2Fb", "/%c3%a9/%zz", "/a b/\xff", "/..", "/.%2e/", "/x/%2E%2E;/y", "/%3b", ""} {
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
