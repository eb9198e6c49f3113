package sim

import (
	"bytes"
	"encoding/xml"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate"
	"github.com/floodgate-dev/floodgate/algorithm"
)

func TestRolling(t *testing.T) {
	// Two requests 500ms apart, window 1s, columns of 250ms over [0, 2s):
	// the trailing count is 1 in [0, 500), 2 in [500, 1000), 1 in
	// [1000, 1500), 0 from 1500.
	ev := []Event{{0, 1}, {ms(500), 1}}
	got := rolling(ev, time.Second, 0, 2*time.Second, 8)
	want := []int64{1, 1, 2, 2, 1, 1, 0, 0}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("rolling = %v, want %v", got, want)
		}
	}
	// A pile inside one column still shows at its full height.
	got = rolling([]Event{{ms(10), 5}, {ms(20), 5}}, ms(5), 0, ms(100), 1)
	if got[0] != 5 {
		t.Errorf("rolling max over one column = %d, want 5", got[0])
	}
}

func TestWindowSVG(t *testing.T) {
	shape := Shape{Limit: 20, Window: 2 * time.Second, Slices: 4, Duration: 6 * time.Second}
	tables, err := Window(ctx, shape, Configs(floodgate.Limit{Limit: 20, Window: 2 * time.Second, Slices: 4}, 2))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WindowSVG(&buf, tables, shape); err != nil {
		t.Fatal(err)
	}
	// Well-formed XML, one coloured line per panel, every name shown.
	dec := xml.NewDecoder(bytes.NewReader(buf.Bytes()))
	paths := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "path" {
			paths++
		}
	}
	if want := 2 * 3 * len(algorithm.Names()); paths != want {
		t.Errorf("%d paths, want %d (sent area and accepted line per panel)", paths, want)
	}
	svg := buf.String()
	names := []string{Uniform2x, PiledBoundary, SpacedAtLimit, "limit L = 20"}
	for _, n := range algorithm.Names() {
		names = append(names, string(n))
	}
	for _, s := range names {
		if !strings.Contains(svg, s) {
			t.Errorf("SVG does not mention %q", s)
		}
	}
	if err := WindowSVG(io.Discard, nil, shape); err == nil {
		t.Errorf("WindowSVG of nothing succeeded")
	}
}
