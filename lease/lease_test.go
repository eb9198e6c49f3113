package lease

import "testing"

// An ID's text round-trips and nothing else parses.
func TestIDText(t *testing.T) {
	for range 100 {
		id := New()
		got, err := Parse(id.String())
		if err != nil || got != id {
			t.Fatalf("%v -> %q -> %v, %v", id, id.String(), got, err)
		}
	}
	for _, bad := range []string{"", "0", "000000000000000000000000", "ABCDEF000000000000000001",
		"g00000000000000000000001", "0000000000000000000000001", " 00000000000000000000001"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted it", bad)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add("00000000000100000000000a")
	f.Add("ffffffffffffffffffffffff")
	f.Add("000000000000000000000000")
	f.Add("zz")
	f.Add(New().String())
	f.Fuzz(func(t *testing.T, s string) {
		id, err := Parse(s)
		if err != nil {
			return
		}
		if !id.Valid() || id.String() != s {
			t.Fatalf("Parse(%q) = %v, which writes %q", s, id, id.String())
		}
	})
}
