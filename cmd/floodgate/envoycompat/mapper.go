package envoycompat

import (
	"fmt"
	"math"
	"os"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// defaultMapping is the statsd-to-Prometheus mapping used without
// PROMETHEUS_MAPPER_YAML: the names and labels envoyproxy/ratelimit's own
// default mapping gives its stats (statsd_exporter's mapping format).
const defaultMapping = `
mappings:
  - {match: "ratelimit.service.rate_limit.*.*.near_limit", name: ratelimit_service_rate_limit_near_limit, labels: {domain: "$1", key1: "$2"}}
  - {match: "ratelimit.service.rate_limit.*.*.over_limit", name: ratelimit_service_rate_limit_over_limit, labels: {domain: "$1", key1: "$2"}}
  - {match: "ratelimit.service.rate_limit.*.*.total_hits", name: ratelimit_service_rate_limit_total_hits, labels: {domain: "$1", key1: "$2"}}
  - {match: "ratelimit.service.rate_limit.*.*.within_limit", name: ratelimit_service_rate_limit_within_limit, labels: {domain: "$1", key1: "$2"}}
  - {match: "ratelimit.service.rate_limit.*.*.shadow_mode", name: ratelimit_service_rate_limit_shadow_mode, labels: {domain: "$1", key1: "$2"}}
  - {match: 'ratelimit\.service\.rate_limit\.([^\.]*)\.([^\.]*)\.([^\.]*)(\..*)?\.near_limit', match_type: regex, name: ratelimit_service_rate_limit_near_limit, labels: {domain: "$1", key1: "$2", key2: "$3"}}
  - {match: 'ratelimit\.service\.rate_limit\.([^\.]*)\.([^\.]*)\.([^\.]*)(\..*)?\.over_limit', match_type: regex, name: ratelimit_service_rate_limit_over_limit, labels: {domain: "$1", key1: "$2", key2: "$3"}}
  - {match: 'ratelimit\.service\.rate_limit\.([^\.]*)\.([^\.]*)\.([^\.]*)(\..*)?\.total_hits', match_type: regex, name: ratelimit_service_rate_limit_total_hits, labels: {domain: "$1", key1: "$2", key2: "$3"}}
  - {match: 'ratelimit\.service\.rate_limit\.([^\.]*)\.([^\.]*)\.([^\.]*)(\..*)?\.within_limit', match_type: regex, name: ratelimit_service_rate_limit_within_limit, labels: {domain: "$1", key1: "$2", key2: "$3"}}
  - {match: 'ratelimit\.service\.rate_limit\.([^\.]*)\.([^\.]*)\.([^\.]*)(\..*)?\.shadow_mode', match_type: regex, name: ratelimit_service_rate_limit_shadow_mode, labels: {domain: "$1", key1: "$2", key2: "$3"}}
  - {match: "ratelimit.service.call.should_rate_limit.*", name: ratelimit_service_should_rate_limit_error, match_metric_type: counter, labels: {err_type: "$1"}}
  - {match: "ratelimit_server.*.total_requests", name: ratelimit_service_total_requests, match_metric_type: counter, labels: {grpc_method: "$1"}}
  - {match: "ratelimit_server.*.response_time", name: ratelimit_service_response_time_seconds, scale: 0.001, labels: {grpc_method: "$1"}}
  - {match: "ratelimit.service.config_load_success", name: ratelimit_service_config_load_success, match_metric_type: counter}
  - {match: "ratelimit.service.config_load_error", name: ratelimit_service_config_load_error, match_metric_type: counter}
`

// statKind is the kind of a stat, for match_metric_type.
type statKind string

const (
	kindCounter  statKind = "counter"
	kindObserver statKind = "observer" // a timer
)

// mapping is one rule of a statsd_exporter mapping file, the parts this
// package applies: match (glob, '*' matching within one dot-separated part,
// or regex), name and labels with $n captures, action map or drop,
// match_metric_type and scale (for timers).
type mapping struct {
	Match           string            `yaml:"match"`
	MatchType       string            `yaml:"match_type"`
	Name            string            `yaml:"name"`
	Labels          map[string]string `yaml:"labels"`
	Action          string            `yaml:"action"`
	MatchMetricType string            `yaml:"match_metric_type"`
	Scale           *float64          `yaml:"scale"`

	re *regexp.Regexp
}

// mapper turns the reference's statsd names into Prometheus names and
// labels, as its Prometheus sink (statsd_exporter's mapper) does: glob
// mappings first, in file order, then regex ones; a name no mapping
// matches becomes the name with every character other than a letter,
// digit or '_' made '_'.
type mapper struct {
	globs, regexes []*mapping
	// labelNames are, per literal metric name, the label names of every
	// mapping giving it: a series lacking one has it empty, which
	// Prometheus reads as absent.
	labelNames map[string][]string
}

// mapped is where a stat goes: drop, or a metric name and its labels.
type mapped struct {
	drop   bool
	name   string
	labels map[string]string
	scale  float64
}

var validMetricName = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)

// loadMapper reads a mapping file (PROMETHEUS_MAPPER_YAML), or the default
// mapping when path is empty. A file it cannot apply is an error naming it.
func loadMapper(path string) (*mapper, error) {
	text := []byte(defaultMapping)
	if path != "" {
		var err error
		if text, err = os.ReadFile(path); err != nil {
			return nil, fmt.Errorf("PROMETHEUS_MAPPER_YAML: %v", err)
		}
	}
	m, err := parseMapper(text)
	if err != nil && path != "" {
		return nil, fmt.Errorf("PROMETHEUS_MAPPER_YAML %s: %v", path, err)
	}
	return m, err
}

func parseMapper(text []byte) (*mapper, error) {
	var file struct {
		Mappings []*mapping `yaml:"mappings"`
	}
	if err := yaml.Unmarshal(text, &file); err != nil {
		return nil, err
	}
	m := &mapper{labelNames: map[string][]string{}}
	for i, mp := range file.Mappings {
		if err := mp.compile(); err != nil {
			return nil, fmt.Errorf("mapping %d (%q): %v", i+1, clip(mp.Match), err)
		}
		if mp.MatchType == "regex" {
			m.regexes = append(m.regexes, mp)
		} else {
			m.globs = append(m.globs, mp)
		}
		if mp.Action == "drop" || strings.Contains(mp.Name, "$") {
			continue
		}
		for l := range mp.Labels {
			if !containsString(m.labelNames[mp.Name], l) {
				m.labelNames[mp.Name] = append(m.labelNames[mp.Name], l)
			}
		}
	}
	return m, nil
}

// unscale keeps timers in milliseconds (PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS
// with the default mapping).
func (m *mapper) unscale() {
	for _, mp := range append(m.globs, m.regexes...) {
		mp.Scale = nil
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (mp *mapping) compile() error {
	switch mp.MatchType {
	case "", "glob":
		mp.MatchType = "glob"
		parts := strings.Split(mp.Match, "*")
		for i := range parts {
			parts[i] = regexp.QuoteMeta(parts[i])
		}
		mp.re = regexp.MustCompile("^" + strings.Join(parts, `([^.]*)`) + "$")
	case "regex":
		re, err := regexp.Compile(mp.Match)
		if err != nil {
			return err
		}
		mp.re = re
	default:
		return fmt.Errorf("match_type %q: glob and regex are served", mp.MatchType)
	}
	switch mp.Action {
	case "", "map":
		if mp.Name == "" {
			return fmt.Errorf("no name")
		}
	case "drop":
	default:
		return fmt.Errorf("action %q: map and drop are served", mp.Action)
	}
	switch mp.MatchMetricType {
	case "", string(kindCounter), string(kindObserver), "timer", "gauge":
	default:
		return fmt.Errorf("match_metric_type %q is not counter, gauge or observer", mp.MatchMetricType)
	}
	if mp.Match == "" {
		return fmt.Errorf("no match")
	}
	if mp.Scale != nil && (math.IsNaN(*mp.Scale) || math.IsInf(*mp.Scale, 0)) {
		return fmt.Errorf("scale is not a number")
	}
	return nil
}

func (mp *mapping) applies(kind statKind) bool {
	t := mp.MatchMetricType
	return t == "" || t == string(kind) || t == "timer" && kind == kindObserver
}

// lookup maps one stat.
func (m *mapper) lookup(stat string, kind statKind) mapped {
	for _, list := range [][]*mapping{m.globs, m.regexes} {
		for _, mp := range list {
			if !mp.applies(kind) {
				continue
			}
			idx := mp.re.FindStringSubmatchIndex(stat)
			if idx == nil {
				continue
			}
			if mp.Action == "drop" {
				return mapped{drop: true}
			}
			out := mapped{name: string(mp.re.ExpandString(nil, mp.Name, stat, idx)), labels: map[string]string{}, scale: 1}
			if mp.Scale != nil {
				out.scale = *mp.Scale
			}
			for _, l := range m.labelNames[mp.Name] {
				out.labels[l] = ""
			}
			for k, v := range mp.Labels {
				out.labels[k] = string(mp.re.ExpandString(nil, v, stat, idx))
			}
			if !validMetricName.MatchString(out.name) {
				return mapped{drop: true}
			}
			return out
		}
	}
	return mapped{name: escapeMetricName(stat), labels: map[string]string{}, scale: 1}
}

// escapeMetricName is statsd_exporter's name for an unmapped stat.
func escapeMetricName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			b[i] = '_'
		}
	}
	if len(b) > 0 && b[0] >= '0' && b[0] <= '9' {
		return "_" + string(b)
	}
	return string(b)
}
