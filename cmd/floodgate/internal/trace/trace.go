// Package trace reads and writes Floodgate's request traces: plain CSV, one
// request per line, as
//
//	time_ms,key[,cost]
//
// time_ms is a whole number of milliseconds from the start of the trace
// (0 to MaxTimeMS), key is the counter key (any bytes except commas and
// control characters; surrounding spaces are trimmed; it may not be empty),
// and cost is the request's weight (1 when omitted). A line whose first
// non-space character is '#' is a comment; blank lines are ignored.
//
// Lines need not be in time order: Parse sorts the records by time, keeping
// the file's order among records with the same time, so a trace merged from
// several sources replays as the requests happened.
package trace

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// Limits Parse enforces, so that a replay's virtual clock and cost sums
// cannot overflow.
const (
	// MaxTimeMS is the largest time a trace may hold: about 31.7 years in
	// milliseconds.
	MaxTimeMS = 1_000_000_000_000
	// MaxCost is the largest cost of one request.
	MaxCost = 1_000_000_000
	// MaxKeyLen is the longest key, in bytes.
	MaxKeyLen = 1024
	// MaxLineLen is the longest line, in bytes, newline excluded.
	MaxLineLen = 4096
)

// Record is one request of a trace.
type Record struct {
	// TimeMS is when the request arrives, in milliseconds from the start of
	// the trace.
	TimeMS int64
	// Key is the counter key the request is counted by.
	Key string
	// Cost is the request's weight, at least 1.
	Cost int64
	// Line is the line of the file the record came from (1-based); zero for
	// records not read from a file.
	Line int
}

// Error is a malformed line. Its message reads "NAME:LINE: reason".
type Error struct {
	Name   string // file name as given to Parse
	Line   int    // 1-based line number
	Reason string
}

// Error returns "NAME:LINE: reason".
func (e *Error) Error() string { return fmt.Sprintf("%s:%d: %s", e.Name, e.Line, e.Reason) }

// Parse reads a whole trace from r and returns its records sorted by time
// (stably). name is used only in error messages. The first malformed line
// stops the parse with an *Error naming it.
func Parse(r io.Reader, name string) ([]Record, error) {
	br := bufio.NewReader(r)
	var recs []Record
	for line := 1; ; line++ {
		text, err := readLine(br)
		if err == errLineTooLong {
			return nil, &Error{name, line, fmt.Sprintf("line longer than %d bytes", MaxLineLen)}
		}
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("%s:%d: %w", name, line, err)
		}
		if err == io.EOF {
			break
		}
		rec, ok, reason := parseLine(text)
		if reason != "" {
			return nil, &Error{name, line, reason}
		}
		if ok {
			rec.Line = line
			recs = append(recs, rec)
		}
	}
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].TimeMS < recs[j].TimeMS })
	return recs, nil
}

var errLineTooLong = errors.New("line too long")

// readLine returns the next line without its "\n" or "\r\n", or io.EOF
// when there is none.
func readLine(br *bufio.Reader) ([]byte, error) {
	var buf []byte
	for {
		chunk, isPrefix, err := br.ReadLine()
		if err != nil {
			if err == io.EOF && buf != nil {
				return buf, nil
			}
			return nil, err
		}
		buf = append(buf, chunk...)
		if len(buf) > MaxLineLen {
			return nil, errLineTooLong
		}
		if !isPrefix {
			if buf == nil {
				buf = []byte{}
			}
			return buf, nil
		}
	}
}

// parseLine parses one line. ok is false for a blank line or a comment; a
// non-empty reason means the line is malformed.
func parseLine(text []byte) (rec Record, ok bool, reason string) {
	s := strings.TrimSpace(string(text))
	if s == "" || s[0] == '#' {
		return Record{}, false, ""
	}
	fields := strings.Split(s, ",")
	if len(fields) < 2 {
		return Record{}, false, "want time_ms,key[,cost]: missing key"
	}
	if len(fields) > 3 {
		return Record{}, false, fmt.Sprintf("want time_ms,key[,cost]: %d fields", len(fields))
	}
	t, why := parseNumber(strings.TrimSpace(fields[0]), "time_ms", 0, MaxTimeMS)
	if why != "" {
		return Record{}, false, why
	}
	key := strings.TrimSpace(fields[1])
	switch {
	case key == "":
		return Record{}, false, "empty key"
	case len(key) > MaxKeyLen:
		return Record{}, false, fmt.Sprintf("key longer than %d bytes", MaxKeyLen)
	case strings.ContainsFunc(key, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return Record{}, false, fmt.Sprintf("control character in key %q", clip(key))
	}
	cost := int64(1)
	if len(fields) == 3 {
		cost, why = parseNumber(strings.TrimSpace(fields[2]), "cost", 1, MaxCost)
		if why != "" {
			return Record{}, false, why
		}
	}
	return Record{TimeMS: t, Key: key, Cost: cost}, true, ""
}

// parseNumber parses a decimal integer in [lo, hi] and names field in the
// reason it gives when s is not one.
func parseNumber(s, field string, lo, hi int64) (int64, string) {
	if s == "" {
		return 0, "empty " + field
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && !(i == 0 && (c == '-' || c == '+')) {
			return 0, fmt.Sprintf("%s %q is not a whole number", field, clip(s))
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	switch {
	case err != nil && !errors.Is(err, strconv.ErrRange):
		return 0, fmt.Sprintf("%s %q is not a whole number", field, clip(s))
	case s[0] == '-' && (err != nil || n < lo):
		return 0, fmt.Sprintf("%s %s is below %d", field, clip(s), lo)
	case err != nil || n > hi:
		return 0, fmt.Sprintf("%s %s is above the maximum %d", field, clip(s), hi)
	}
	if n < lo {
		return 0, fmt.Sprintf("%s %d is below %d", field, n, lo)
	}
	return n, ""
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// Write writes recs as a trace, one line each, after the given comment lines
// (each written as "# " plus the line). The cost field is omitted when it is
// 1. Write does not sort recs.
func Write(w io.Writer, comments []string, recs []Record) error {
	bw := bufio.NewWriter(w)
	for _, c := range comments {
		for _, l := range strings.Split(c, "\n") {
			bw.WriteString("# ")
			bw.WriteString(l)
			bw.WriteByte('\n')
		}
	}
	for _, r := range recs {
		if r.Key == "" || strings.ContainsAny(r.Key, ",\r\n") || strings.TrimSpace(r.Key) != r.Key {
			return fmt.Errorf("trace: key %q cannot be written: it is empty, has a comma or newline, or surrounding spaces", r.Key)
		}
		if r.TimeMS < 0 || r.TimeMS > MaxTimeMS || r.Cost < 1 || r.Cost > MaxCost {
			return fmt.Errorf("trace: record %+v is out of range", r)
		}
		bw.WriteString(strconv.FormatInt(r.TimeMS, 10))
		bw.WriteByte(',')
		bw.WriteString(r.Key)
		if r.Cost != 1 {
			bw.WriteByte(',')
			bw.WriteString(strconv.FormatInt(r.Cost, 10))
		}
		bw.WriteByte('\n')
	}
	return bw.Flush()
}
