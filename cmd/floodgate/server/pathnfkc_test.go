package server

import (
	"net/url"
	"testing"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/floodgate-dev/floodgate/internal/urlpath"
)

// TestCanonicalRefusesWhatNFKCMakesASCII holds the gateway's path policy
// to Unicode's own tables (golang.org/x/text's NFKC), one code point at a
// time: a path segment holding a code point whose compatibility
// normalization is ASCII text (full-width ｌ, ligature ﬁ, Kelvin sign K...)
// is refused under the default policy, which an upstream that normalises
// would read as another path, and every other code point is accepted; with
// compatibility: keep every one is accepted.
func TestCanonicalRefusesWhatNFKCMakesASCII(t *testing.T) {
	refused, checked := 0, 0
	for r := rune(0x80); r <= unicode.MaxRune; r++ {
		if !utf8.ValidRune(r) {
			continue
		}
		checked++
		s := string(r)
		n := norm.NFKC.String(s)
		toASCII := n != s
		for i := 0; i < len(n) && toASCII; i++ {
			toASCII = n[i] < utf8.RuneSelf
		}
		path := "/api/x" + url.PathEscape(s)
		_, _, err := urlpath.Canonical(path, urlpath.Policy{})
		if (err != nil) != toASCII {
			t.Errorf("%U (NFKC %q): refused %v, want %v (%v)", r, n, err != nil, toASCII, err)
		}
		if _, _, err := urlpath.Canonical(path, urlpath.Policy{Compatibility: urlpath.KeepCompatibility}); err != nil {
			t.Errorf("%U with compatibility keep: %v", r, err)
		}
		if toASCII {
			refused++
		}
	}
	t.Logf("%d of %d code points refused", refused, checked)
}
