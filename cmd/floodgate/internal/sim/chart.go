package sim

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"sort"
	"strings"
	"time"
)

// palette colours the algorithms in chart order; it is readable on white and
// by most colour-blind readers.
var palette = []string{"#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00",
	"#56b4e9", "#7a5195", "#8c564b", "#000000"}

// rolling returns, for each of n equal columns of [x0, x1), the highest
// value that the trailing-window sum of events (cost of events at or before
// t and after t - window) reaches at any instant in that column. Taking the
// maximum per column keeps short piles visible at any scale.
func rolling(events []Event, window, x0, x1 time.Duration, n int) []int64 {
	type change struct {
		at time.Duration
		d  int64
	}
	ch := make([]change, 0, 2*len(events))
	for _, e := range events {
		ch = append(ch, change{e.At, e.Cost}, change{e.At + window, -e.Cost})
	}
	sort.Slice(ch, func(i, j int) bool { return ch[i].at < ch[j].at })
	out := make([]int64, n)
	var cur int64
	p := 0
	dx := (x1 - x0) / time.Duration(n)
	for k := range out {
		start, end := x0+time.Duration(k)*dx, x0+time.Duration(k+1)*dx
		for p < len(ch) && ch[p].at <= start {
			cur += ch[p].d
			p++
		}
		m := cur
		for p < len(ch) && ch[p].at < end {
			at := ch[p].at
			for p < len(ch) && ch[p].at == at {
				cur += ch[p].d
				p++
			}
			m = max(m, cur)
		}
		out[k] = m
	}
	return out
}

// WindowSVG draws tables as one self-contained SVG: a grid of small panels,
// one row per pattern and one column per algorithm. Each panel plots, over
// the run's time in seconds, the number of requests sent in the trailing
// window (grey area), the number accepted in the trailing window (coloured
// line; for leaky-bucket at the delayed time they proceed), and the limit L
// (dashed red line). Where the coloured line rises above the red one, the
// promise is broken; the panel's caption gives the busiest window and the
// false rejects.
func WindowSVG(w io.Writer, tables []WindowTable, shape Shape) error {
	if len(tables) == 0 || len(tables[0].Results) == 0 {
		return fmt.Errorf("sim: nothing to draw")
	}
	const (
		pw, ph   = 150, 110 // panel plot area
		gapX     = 22
		gapY     = 58
		left     = 120
		top      = 92
		bottom   = 80
		right    = 20
		nColumns = pw // one sample per pixel
	)
	cols := len(tables[0].Results)
	rows := len(tables)
	width := left + cols*(pw+gapX) - gapX + right
	height := top + rows*(ph+gapY) - gapY + bottom

	sent, acc, xMax, yMax := chartSeries(tables, shape, nColumns)

	b := bufio.NewWriter(w)
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", width, height, width, height)
	p(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	p(`<text x="%d" y="22" font-size="16" font-weight="bold">Floodgate: requests in the trailing %v, limit L = %d (reference patterns, real limiter, virtual clock)</text>`+"\n", left, shape.Window, shape.Limit)
	p(`<text x="%d" y="42" font-size="12">x: time in seconds from the start of the run. y: requests inside the %v ending at that moment (highest value within each pixel).</text>`+"\n", left, shape.Window)
	// Legend.
	lx := left
	p(`<rect x="%d" y="54" width="18" height="10" fill="#d9d9d9"/><text x="%d" y="63">requests sent in the trailing window</text>`+"\n", lx, lx+24)
	lx += 240
	p(`<line x1="%d" y1="59" x2="%d" y2="59" stroke="#0072b2" stroke-width="2"/><text x="%d" y="63">requests accepted in the trailing window (one colour per algorithm)</text>`+"\n", lx, lx+18, lx+24)
	lx += 420
	p(`<line x1="%d" y1="59" x2="%d" y2="59" stroke="#e41a1c" stroke-width="1.5" stroke-dasharray="5,3"/><text x="%d" y="63">limit L = %d: above it the promise is broken</text>`+"\n", lx, lx+18, lx+24, shape.Limit)

	for i, t := range tables {
		y0 := top + i*(ph+gapY)
		p(`<text x="10" y="%d" font-size="12" font-weight="bold">%s</text>`+"\n", y0+ph/2-6, html.EscapeString(t.Name))
		p(`<text x="10" y="%d" font-size="11">%d requests</text>`+"\n", y0+ph/2+10, len(t.Requests))
		for j, res := range t.Results {
			x0 := left + j*(pw+gapX)
			colour := palette[j%len(palette)]
			if i == 0 {
				p(`<text x="%d" y="%d" font-size="12" font-weight="bold" fill="%s">%s</text>`+"\n", x0, top-8, colour, html.EscapeString(string(res.Algorithm)))
			}
			X := func(k int) float64 { return float64(x0) + float64(k)*pw/float64(nColumns) }
			Y := func(v int64) float64 { return float64(y0+ph) - float64(v)*ph/float64(yMax) }
			p(`<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999" stroke-width="0.5"/>`+"\n", x0, y0, pw, ph)
			p(`<path d="%s" fill="#d9d9d9" stroke="none"/>`+"\n", stepPath(sent[i], X, Y, true))
			p(`<path d="%s" fill="none" stroke="%s" stroke-width="1.5"/>`+"\n", stepPath(acc[i][j], X, Y, false), colour)
			p(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e41a1c" stroke-width="1" stroke-dasharray="5,3"/>`+"\n", x0, Y(shape.Limit), x0+pw, Y(shape.Limit))
			p(`<text x="%d" y="%d" font-size="10">busiest %d (x%.2f)</text>`+"\n", x0+3, y0+ph+13, res.Busiest, res.Ratio)
			if res.FalseRejects > 0 {
				p(`<text x="%d" y="%d" font-size="10" fill="#b2182b">%d false rejects</text>`+"\n", x0+3, y0+ph+25, res.FalseRejects)
			}
			// Axes labels on the first column and the last row.
			if j == 0 {
				for _, v := range []int64{0, shape.Limit, yMax} {
					p(`<text x="%d" y="%.1f" font-size="9" text-anchor="end">%d</text>`+"\n", x0-3, Y(v)+3, v)
				}
			}
			if i == rows-1 {
				for _, s := range []time.Duration{0, xMax / 2, xMax} {
					k := int(int64(s) * nColumns / int64(xMax))
					p(`<text x="%.1f" y="%d" font-size="9" text-anchor="middle">%gs</text>`+"\n", X(k), y0+ph+38, s.Seconds())
				}
			}
		}
	}
	notes := []string{
		"concurrency: each request is released right after it is decided, so it caps only simultaneous requests, not a rate.",
		"leaky-bucket: an accepted request is counted when it proceeds, at its arrival time plus the delay it was given.",
	}
	for k, n := range notes {
		p(`<text x="%d" y="%d" font-size="11" fill="#444">%s</text>`+"\n", left, height-22+k*14, html.EscapeString(n))
	}
	p("</svg>\n")
	return b.Flush()
}

// chartSeries samples every table's trailing-window counts of sent and
// accepted requests at n columns, on common scales: x from 0 to the last
// moment anything happens, y from 0 to the highest count (and at least 2L).
func chartSeries(tables []WindowTable, shape Shape, n int) (sent [][]int64, acc [][][]int64, xMax time.Duration, yMax int64) {
	xMax = shape.Duration
	for _, t := range tables {
		for _, r := range t.Requests {
			xMax = max(xMax, r.At+time.Millisecond)
		}
		for _, res := range t.Results {
			for _, o := range res.Outcomes {
				if o.Allowed {
					xMax = max(xMax, o.Effective+time.Millisecond)
				}
			}
		}
	}
	xMax = (xMax + time.Second - 1).Truncate(time.Second)
	sent = make([][]int64, len(tables))
	acc = make([][][]int64, len(tables))
	yMax = 2 * shape.Limit
	for i, t := range tables {
		sent[i] = rolling(Sent(t.Requests), shape.Window, 0, xMax, n)
		for _, v := range sent[i] {
			yMax = max(yMax, v)
		}
		acc[i] = make([][]int64, len(t.Results))
		for j, res := range t.Results {
			acc[i][j] = rolling(Accepted(t.Requests, res.Outcomes), shape.Window, 0, xMax, n)
		}
	}
	return sent, acc, xMax, niceCeil(yMax * 11 / 10)
}

// stepPath draws vs as a step line, one step per column; closed paths come
// back along the x axis so they can be filled.
func stepPath(vs []int64, X func(int) float64, Y func(int64) float64, closed bool) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "M%.1f,%.1f", X(0), Y(vs[0]))
	for k := range vs {
		if k > 0 && vs[k] != vs[k-1] {
			fmt.Fprintf(&sb, "H%.1fV%.1f", X(k), Y(vs[k]))
		}
	}
	fmt.Fprintf(&sb, "H%.1f", X(len(vs)))
	if closed {
		fmt.Fprintf(&sb, "V%.1fH%.1fZ", Y(0), X(0))
	}
	return sb.String()
}

// niceCeil rounds v up to two significant digits.
func niceCeil(v int64) int64 {
	step := int64(1)
	for v/step >= 100 {
		step *= 10
	}
	return (v + step - 1) / step * step
}
