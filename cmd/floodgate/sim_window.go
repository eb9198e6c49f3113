package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"text/tabwriter"
	"time"

	"github.com/floodgate-dev/floodgate"
	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/sim"
)

// windowNotes say how the two algorithms that are not window counters are
// counted; the text and JSON outputs and the chart all carry them.
var windowNotes = []string{
	"concurrency caps requests in flight, not a rate: the simulator releases each request right after it is decided, so it accepts everything.",
	"leaky-bucket delays instead of rejecting: an accepted request counts in the busiest window at its arrival time plus its delay.",
}

// runSimWindow runs the three reference patterns through every algorithm.
func runSimWindow(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("floodgate sim window", flag.ContinueOnError)
	var lf limitFlags
	lf.register(fs, false)
	duration := fs.Duration("duration", 180*time.Second, "how long the uniform and spaced patterns run: T")
	asJSON := fs.Bool("json", false, "print the tables as JSON")
	svg := fs.String("svg", "", "also draw the runs as an SVG chart into `FILE`")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: floodgate sim window [flags]")
		fmt.Fprintln(stderr, "\nRuns three patterns (uniform 2x, piled at the window boundary, spaced at the limit)")
		fmt.Fprintln(stderr, "through every algorithm, each in a fresh real limiter under a virtual clock.")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	shape := sim.Shape{Limit: lf.limit, Window: lf.window, Slices: lf.slices, Duration: *duration}
	var limits []floodgate.Limit
	for _, name := range algorithm.Names() {
		c, err := lf.config(name)
		if err != nil {
			return fmt.Errorf("sim window: --svg: %w", err)
		}
		limits = append(limits, c)
	}
	tables, err := sim.Window(context.Background(), shape, limits)
	if err != nil {
		return err // sim's errors name the package already
	}
	if *svg != "" {
		f, err := os.Create(*svg)
		if err != nil {
			return fmt.Errorf("sim window: %w", err)
		}
		err = sim.WindowSVG(f, tables, shape)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("sim window: %w", err)
		}
	}
	if *asJSON {
		return writeJSON(stdout, windowJSON(shape, tables))
	}
	printWindow(stdout, shape, limits, tables)
	if *svg != "" {
		fmt.Fprintf(stdout, "\nchart written to %s\n", *svg)
	}
	return nil
}

type windowResultJSON struct {
	Algorithm    string  `json:"algorithm"`
	Accepted     int     `json:"accepted"`
	Rejected     int     `json:"rejected"`
	Busiest      int64   `json:"busiest"`
	Overshoot    int64   `json:"overshoot"`
	Ratio        float64 `json:"ratio"`
	FalseRejects int     `json:"false_rejects"`
}

type windowPatternJSON struct {
	Name     string             `json:"name"`
	Requests int                `json:"requests"`
	Results  []windowResultJSON `json:"results"`
}

type windowJSONDoc struct {
	Limit    int64               `json:"limit"`
	WindowMS int64               `json:"window_ms"`
	Patterns []windowPatternJSON `json:"patterns"`
	Notes    []string            `json:"notes"`
}

func windowJSON(shape sim.Shape, tables []sim.WindowTable) windowJSONDoc {
	doc := windowJSONDoc{Limit: shape.Limit, WindowMS: shape.Window.Milliseconds(), Notes: windowNotes}
	for _, t := range tables {
		p := windowPatternJSON{Name: t.Name, Requests: len(t.Requests)}
		for _, r := range t.Results {
			p.Results = append(p.Results, windowResultJSON{
				Algorithm: string(r.Algorithm), Accepted: r.Accepted, Rejected: r.Rejected,
				Busiest: r.Busiest, Overshoot: r.Overshoot,
				Ratio:        math.Round(r.Ratio*1000) / 1000,
				FalseRejects: r.FalseRejects,
			})
		}
		doc.Patterns = append(doc.Patterns, p)
	}
	return doc
}

func printWindow(w io.Writer, shape sim.Shape, limits []floodgate.Limit, tables []sim.WindowTable) {
	fmt.Fprintf(w, "sim window: %v of traffic, limit %d per %v, %d slices of %v\n",
		shape.Duration, shape.Limit, shape.Window, shape.Slices, shape.Window/time.Duration(shape.Slices))
	fmt.Fprintln(w, "each row is a fresh real limiter (in-memory store) under a virtual clock; parameters:")
	for _, c := range limits {
		fmt.Fprintf(w, "  %s\n", describe(c))
	}
	for _, t := range tables {
		fmt.Fprintf(w, "\npattern %q: %d requests\n", t.Name, len(t.Requests))
		tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "%-16s\taccepted\trejected\tbusiest %v\tovershoot\tovershoot ratio\tfalse rejects\t\n", "algorithm", shape.Window)
		for _, r := range t.Results {
			fmt.Fprintf(tw, "%-16s\t%d\t%d\t%d\t%d\tx%.3f\t%d\t\n", r.Algorithm, r.Accepted, r.Rejected, r.Busiest, r.Overshoot, r.Ratio, r.FalseRejects)
		}
		tw.Flush()
	}
	fmt.Fprintf(w, "\nbusiest: most requests accepted inside any %v interval; overshoot = busiest - %d; ratio = busiest / %d.\n", shape.Window, shape.Limit, shape.Limit)
	fmt.Fprintf(w, "false rejects: rejections while the client had sent at most %d in the %v ending at that request.\n", shape.Limit, shape.Window)
	fmt.Fprintln(w, "notes:")
	for _, n := range windowNotes {
		fmt.Fprintf(w, "  %s\n", n)
	}
}
