package server

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// fuzzLineRE picks the line number out of a "FILE:LINE: ..." message.
var fuzzLineRE = regexp.MustCompile(`^fuzz\.yaml:(\d+): `)

// FuzzParseConfig feeds arbitrary bytes to the configuration parser. An
// accepted file must yield a configuration that passes validation and
// survives a write-and-reread unchanged; a rejected one must give an error
// every line of which names the file, with a line number (when there is
// one) inside the file.
func FuzzParseConfig(f *testing.F) {
	f.Add(DefaultYAML())
	f.Add([]byte(""))
	f.Add([]byte("http:\n  addr: off\ngrpc:\n  addr: \"[::1]:9000\"\n"))
	f.Add([]byte("store:\n  type: redis\n  addrs: [127.0.0.1:6379]\n  prefix: x\n"))
	f.Add([]byte("store:\n  type: redis-cluster\n  addrs: []\n"))
	f.Add([]byte("store:\n  type: redis\n  addrs: [\"rediss://u:p@h:1/2\"]\n  username: u\n  password_file: pw\n  db: 2\n  tls: {ca_file: ca.pem, server_name: h}\n"))
	f.Add([]byte("store:\n  type: redis\n  addrs: [a:1, b:2]\n  sentinel: {master: m, username: s, password_file: spw}\n"))
	f.Add([]byte("arrangement:\n  mode: split\n  nodes: 4\n  interval: 1m30s\n"))
	f.Add([]byte("arrangement:\n  interval: soon\n"))
	f.Add([]byte("gateway:\n  addr: 127.0.0.1:0\n  routes:\n    - prefix: /a\n      upstream: http://127.0.0.1:1\n"))
	f.Add([]byte("gateway:\n  descriptors: [ip, \"header:\", cookie]\n"))
	f.Add([]byte("rules: rules.yaml\nhttp:\n  tls:\n    cert: c.pem\n    key: k.pem\n"))
	f.Add([]byte("trusted_proxies: [10.0.0.0/8, \"::1\"]\nmax_body_bytes: 1\nshutdown_timeout: 0s\n"))
	f.Add([]byte("log: {level: debug, format: json}\n"))
	f.Add([]byte("http: [\n"))
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte("max_body_bytes: 99999999999999999999\n"))
	f.Add([]byte("---\nhttp: {}\n---\ngrpc: {}\n"))
	f.Add([]byte("\t\n"))
	f.Add([]byte("\r0"))

	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig("fuzz.yaml", data)
		if err != nil {
			checkConfigError(t, data, err)
			return
		}
		if err := c.validate(func(string) string { return "fuzz.yaml" }); err != nil {
			t.Fatalf("accepted a config that does not validate: %v\ninput: %q", err, data)
		}
		out, err := yaml.Marshal(c)
		if err != nil {
			t.Fatalf("marshal accepted config: %v", err)
		}
		c2, err := ParseConfig("fuzz.yaml", out)
		if err != nil {
			t.Fatalf("accepted config does not reparse: %v\ninput: %q\nwritten: %s", err, data, out)
		}
		out2, err := yaml.Marshal(c2)
		if err != nil {
			t.Fatalf("marshal reparsed config: %v", err)
		}
		if !bytes.Equal(out, out2) {
			t.Fatalf("config changed on reread\ninput: %q\nfirst:\n%s\nsecond:\n%s", data, out, out2)
		}
	})
}

func checkConfigError(t *testing.T, data []byte, err error) {
	t.Helper()
	msg := err.Error()
	if msg == "" {
		t.Fatalf("empty error for %q", data)
	}
	// yaml.v3 breaks lines at LF, CR, CR LF, NEL, LS and PS; count each
	// break character, which can only overstate the number of lines.
	lines := 1 + bytes.Count(data, []byte("\n")) + bytes.Count(data, []byte("\r")) +
		bytes.Count(data, []byte("\u0085")) + bytes.Count(data, []byte("\u2028")) + bytes.Count(data, []byte("\u2029"))
	for _, l := range strings.Split(msg, "\n") {
		if !strings.HasPrefix(l, "fuzz.yaml:") {
			t.Fatalf("error line %q does not name the file\ninput: %q", l, data)
		}
		if g := fuzzLineRE.FindStringSubmatch(l); g != nil {
			n, _ := strconv.Atoi(g[1])
			if n < 1 || n > lines {
				t.Fatalf("error line %q names line %d of a %d-line file\ninput: %q", l, n, lines, data)
			}
		}
	}
}

// TestConfigErrorMultiLineValue checks that a bad value spanning several
// lines still gives an error whose every line names the file; the fuzzer
// found that yaml.v3 quotes such a value with its newlines.
func TestConfigErrorMultiLineValue(t *testing.T) {
	data := []byte("0\n\n0")
	_, err := ParseConfig("fuzz.yaml", data)
	if err == nil {
		t.Fatal("a bare scalar was accepted as a config")
	}
	if !strings.HasPrefix(err.Error(), "fuzz.yaml:1: ") {
		t.Fatalf("error %q does not point at fuzz.yaml:1", err)
	}
	checkConfigError(t, data, err)
}
