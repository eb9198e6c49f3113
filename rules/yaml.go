package rules

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Error is one problem in a rule file, at a line. Its text reads
// "FILE:LINE: what is wrong; how to fix it".
type Error struct {
	File string // the name given to Parse, or the path given to Load
	Line int    // 1-based; 0 when the problem is not at one line
	Msg  string // what is wrong and how to fix it
}

// Error returns "FILE:LINE: message", or "FILE: message" without a line.
func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// maxErrors is how many problems one Parse reports before it stops looking.
const maxErrors = 20

// decoder walks yaml.v3 nodes, collecting errors with positions.
type decoder struct {
	file string
	errs []error
}

func (d *decoder) errorf(n *yaml.Node, format string, args ...any) {
	if len(d.errs) >= maxErrors {
		return
	}
	line := 0
	if n != nil {
		line = n.Line
	}
	d.errs = append(d.errs, &Error{File: d.file, Line: line, Msg: fmt.Sprintf(format, args...)})
}

func (d *decoder) err() error {
	if len(d.errs) == 0 {
		return nil
	}
	sort.SliceStable(d.errs, func(i, j int) bool {
		return d.errs[i].(*Error).Line < d.errs[j].(*Error).Line
	})
	return errors.Join(d.errs...)
}

// field is one key/value pair of a mapping, with the key node kept for its
// line.
type field struct {
	key   *yaml.Node
	value *yaml.Node
}

// fields reads a mapping whose keys must be among allowed. Unknown keys,
// duplicate keys and non-mappings are reported; the known fields come back
// by name.
func (d *decoder) fields(n *yaml.Node, what string, allowed ...string) map[string]field {
	out := map[string]field{}
	if n.Kind == yaml.AliasNode {
		d.errorf(n, "%s: aliases (*name) are not supported in rule files; write the value out", what)
		return out
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n, "%s must be a mapping of field: value; got %s", what, kindName(n))
		return out
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, "%s: field names must be plain words; got %s", what, kindName(k))
			continue
		}
		name := k.Value
		if !contains(allowed, name) {
			d.errorf(k, "%s: unknown field %q; the fields are %s%s", what, name,
				strings.Join(allowed, ", "), suggest(name, allowed))
			continue
		}
		if prev, dup := out[name]; dup {
			d.errorf(k, "%s: field %q appears twice (first on line %d); keep one", what, name, prev.key.Line)
			continue
		}
		if v.Kind == yaml.AliasNode {
			d.errorf(v, "%s: aliases (*name) are not supported in rule files; write the value out", what)
			continue
		}
		out[name] = field{k, v}
	}
	return out
}

// suggest returns ` (did you mean "x"?)` for a near miss among names.
func suggest(name string, names []string) string {
	best, bestD := "", 3
	lower := strings.ToLower(name)
	for _, c := range names {
		if len(lower) >= 4 && (strings.HasPrefix(c, lower) || strings.HasPrefix(lower, c)) {
			return fmt.Sprintf(" (did you mean %q?)", c)
		}
	}
	for _, c := range names {
		if dd := editDistance(strings.ToLower(name), c); dd < bestD {
			best, bestD = c, dd
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 99
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing (null)"
		}
		return fmt.Sprintf("%q", clip(n.Value))
	}
	return "nothing"
}

// clip shortens a value quoted in an error message.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// scalar returns n's text if n is a non-null scalar.
func (d *decoder) scalar(n *yaml.Node, what string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		d.errorf(n, "%s must be a single value; got %s", what, kindName(n))
		return "", false
	}
	return n.Value, true
}

// isNull reports a field written with no value (descriptors: alone on its
// line) or as null.
func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

func (d *decoder) str(n *yaml.Node, what string) (string, bool) {
	s, ok := d.scalar(n, what)
	if !ok {
		return "", false
	}
	if len(s) > maxValueLen {
		d.errorf(n, "%s is %d bytes long; the most is %d", what, len(s), maxValueLen)
		return "", false
	}
	return s, true
}

func (d *decoder) boolean(n *yaml.Node, what string) (bool, bool) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!bool" {
		var b bool
		if err := n.Decode(&b); err == nil {
			return b, true
		}
	}
	d.errorf(n, "%s must be true or false; got %s", what, kindName(n))
	return false, false
}

// integer reads a whole number in [lo, hi].
func (d *decoder) integer(n *yaml.Node, what string, lo, hi int64) (int64, bool) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!int" {
		var v int64
		if err := n.Decode(&v); err == nil {
			if v < lo || v > hi {
				d.errorf(n, "%s must be between %d and %d; got %d", what, lo, hi, v)
				return 0, false
			}
			return v, true
		}
		d.errorf(n, "%s %s is out of range; the most is %d", what, clip(n.Value), hi)
		return 0, false
	}
	d.errorf(n, "%s must be a whole number; got %s", what, kindName(n))
	return 0, false
}

// number reads a finite float in (lo, hi].
func (d *decoder) number(n *yaml.Node, what string, lo, hi float64) (float64, bool) {
	if n.Kind == yaml.ScalarNode && (n.Tag == "!!float" || n.Tag == "!!int") {
		v, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
		if err == nil && !math.IsNaN(v) && !math.IsInf(v, 0) {
			if v <= lo || v > hi {
				d.errorf(n, "%s must be above %g and at most %g; got %g", what, lo, hi, v)
				return 0, false
			}
			return v, true
		}
	}
	d.errorf(n, "%s must be a number; got %s", what, kindName(n))
	return 0, false
}

// duration reads a Go duration such as 90s, 1m or 1h30m, in (0, maxWindow].
func (d *decoder) duration(n *yaml.Node, what string) (time.Duration, bool) {
	s, ok := d.scalar(n, what)
	if !ok {
		return 0, false
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		d.errorf(n, "%s %q is not a duration; write a number with a unit, such as 500ms, 90s, 1m or 24h", what, clip(s))
		return 0, false
	}
	if v <= 0 || v > maxWindow {
		d.errorf(n, "%s must be above 0 and at most %v; got %v", what, maxWindow, v)
		return 0, false
	}
	return v, true
}
