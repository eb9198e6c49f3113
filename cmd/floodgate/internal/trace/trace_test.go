package trace

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	in := "# a comment\n" +
		"\n" +
		"100,alice\n" +
		"  50 , bob , 3 \r\n" +
		"   # indented comment\n" +
		"100,carol,1\n" +
		"0,alice" // no final newline
	got, err := Parse(strings.NewReader(in), "t.csv")
	if err != nil {
		t.Fatal(err)
	}
	want := []Record{
		{TimeMS: 0, Key: "alice", Cost: 1, Line: 7},
		{TimeMS: 50, Key: "bob", Cost: 3, Line: 4},
		{TimeMS: 100, Key: "alice", Cost: 1, Line: 3},
		{TimeMS: 100, Key: "carol", Cost: 1, Line: 6},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Parse =\n%+v\nwant\n%+v", got, want)
	}
}

func TestParseEmpty(t *testing.T) {
	for _, in := range []string{"", "\n\n", "# only\n# comments"} {
		t.Run(in, func(t *testing.T) {
			got, err := Parse(strings.NewReader(in), "e.csv")
			if err != nil || len(got) != 0 {
				t.Errorf("Parse(%q) = %v, %v; want no records, no error", in, got, err)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		in     string
		line   int
		reason string
	}{
		{"abc,k\n", 1, `time_ms "abc" is not a whole number`},
		{"1,k\n2\n", 2, "missing key"},
		{"1,k\n\n3,\n", 3, "empty key"},
		{"-5,k\n", 1, "time_ms -5 is below 0"},
		{"1.5,k\n", 1, "not a whole number"},
		{"1,k,0\n", 1, "cost 0 is below 1"},
		{"1,k,-2\n", 1, "cost -2 is below 1"},
		{"1,k,x\n", 1, `cost "x" is not a whole number`},
		{"1,k,\n", 1, "empty cost"},
		{"1,k,1,1\n", 1, "4 fields"},
		{"1000000000001,k\n", 1, "above the maximum"},
		{"99999999999999999999999,k\n", 1, "above the maximum"},
		{"-99999999999999999999999,k\n", 1, "below 0"},
		{"1,k,1000000001\n", 1, "cost 1000000001 is above the maximum"},
		{"1,k\x01x\n", 1, "control character in key"},
		{",k\n", 1, "empty time_ms"},
		{"1," + strings.Repeat("k", MaxKeyLen+1) + "\n", 1, "key longer than"},
		{"# fine\n1," + strings.Repeat("k", MaxLineLen+1) + "\n", 2, "line longer than"},
	}
	for _, c := range cases {
		t.Run(c.reason, func(t *testing.T) {
			_, err := Parse(strings.NewReader(c.in), "bad.csv")
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("Parse(%q) error = %v, want *Error", c.in, err)
			}
			if pe.Line != c.line || !strings.Contains(pe.Reason, c.reason) {
				t.Errorf("Parse(%q) = %v, want line %d and reason containing %q", c.in, err, c.line, c.reason)
			}
			if prefix := "bad.csv:"; !strings.HasPrefix(err.Error(), prefix) {
				t.Errorf("error %q does not start with %q", err, prefix)
			}
		})
	}
}

func TestWriteRoundTrip(t *testing.T) {
	recs := []Record{{TimeMS: 0, Key: "a", Cost: 1}, {TimeMS: 5, Key: "b c", Cost: 7}, {TimeMS: 5, Key: "a", Cost: 1}}
	var buf bytes.Buffer
	if err := Write(&buf, []string{"made by a test", "two\nlines"}, recs); err != nil {
		t.Fatal(err)
	}
	want := "# made by a test\n# two\n# lines\n0,a\n5,b c,7\n5,a\n"
	if buf.String() != want {
		t.Fatalf("Write wrote %q, want %q", buf.String(), want)
	}
	got, err := Parse(&buf, "rt")
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		got[i].Line = 0
	}
	if !reflect.DeepEqual(got, recs) {
		t.Fatalf("round trip = %+v, want %+v", got, recs)
	}
}

func TestWriteRejectsUnwritable(t *testing.T) {
	for _, r := range []Record{{Key: "a,b", Cost: 1}, {Key: "", Cost: 1}, {Key: " a", Cost: 1}, {Key: "a", Cost: 0}, {TimeMS: -1, Key: "a", Cost: 1}} {
		if err := Write(&bytes.Buffer{}, nil, []Record{r}); err == nil {
			t.Errorf("Write(%+v) succeeded, want an error", r)
		}
	}
}

// FuzzParseTrace checks that Parse never panics, that every error names a
// line that exists, and that what it accepts survives Write and Parse again
// unchanged.
func FuzzParseTrace(f *testing.F) {
	for _, s := range []string{
		"0,a\n1,b,2\n",
		"# c\n\n10, key with spaces ,3\r\n5,a",
		"abc,k\n",
		"1,k,1,1",
		"-1,k",
		"99999999999999999999,k",
		"1,\x00",
		"1,k\n2\n",
		"   #\n,\n",
		"1000000000000,k,1000000000",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, err := Parse(bytes.NewReader(data), "fuzz")
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a *Error", err)
			}
			if lines := bytes.Count(data, []byte("\n")) + 1; pe.Line < 1 || pe.Line > lines {
				t.Fatalf("error names line %d of %d", pe.Line, lines)
			}
			return
		}
		for i, r := range recs {
			if r.TimeMS < 0 || r.TimeMS > MaxTimeMS || r.Cost < 1 || r.Cost > MaxCost || r.Key == "" {
				t.Fatalf("record out of range: %+v", r)
			}
			if i > 0 && recs[i-1].TimeMS > r.TimeMS {
				t.Fatalf("records not sorted at %d", i)
			}
		}
		var buf bytes.Buffer
		if err := Write(&buf, []string{"fuzz"}, recs); err != nil {
			t.Fatalf("Write of parsed records: %v", err)
		}
		again, err := Parse(&buf, "again")
		if err != nil {
			t.Fatalf("Parse of written records: %v", err)
		}
		if len(again) != len(recs) {
			t.Fatalf("round trip: %d records, want %d", len(again), len(recs))
		}
		for i := range recs {
			a, b := recs[i], again[i]
			if a.TimeMS != b.TimeMS || a.Key != b.Key || a.Cost != b.Cost {
				t.Fatalf("round trip record %d: %+v, want %+v", i, b, a)
			}
		}
	})
}
