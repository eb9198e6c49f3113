package redisstore

import (
	"slices"
	"strings"
	"testing"
)

func TestParseURL(t *testing.T) {
	for _, c := range []struct {
		in      string
		addrs   []string
		user    string
		pass    string
		db      int
		tls     bool
		cluster bool
		master  string
		address string
	}{
		{in: "127.0.0.1:6379", addrs: []string{"127.0.0.1:6379"}, address: "redis://127.0.0.1:6379"},
		{in: "redis://10.0.0.5:6379", addrs: []string{"10.0.0.5:6379"}, address: "redis://10.0.0.5:6379"},
		{in: "redis://:pw@h:1/2", addrs: []string{"h:1"}, pass: "pw", db: 2, address: "redis://h:1/2"},
		{in: "rediss://app:p%40ss%3Aw%2Fd@redis.internal:6380/0", addrs: []string{"redis.internal:6380"}, user: "app",
			pass: "p@ss:w/d", tls: true, address: "rediss://app@redis.internal:6380"},
		{in: "redis://u:p@ss@h:1", addrs: []string{"h:1"}, user: "u", pass: "p@ss", address: "redis://u@h:1"},
		{in: "redis-cluster://a:1,b:2", addrs: []string{"a:1", "b:2"}, cluster: true, address: "redis-cluster://a:1,b:2"},
		{in: "rediss-cluster://a:1", addrs: []string{"a:1"}, cluster: true, tls: true, address: "rediss-cluster://a:1"},
		{in: "redis-sentinel://s1:26379,s2:26379/1?master=main", addrs: []string{"s1:26379", "s2:26379"}, db: 1,
			master: "main", address: "redis-sentinel://s1:26379,s2:26379/1?master=main"},
		{in: "REDISS://[::1]:6379", addrs: []string{"[::1]:6379"}, tls: true, address: "rediss://[::1]:6379"},
	} {
		t.Run(c.in, func(t *testing.T) {
			o, err := ParseURL(c.in)
			if err != nil {
				t.Fatalf("ParseURL(%q): %v", c.in, err)
			}
			if !slices.Equal(o.Addrs, c.addrs) || o.Username != c.user || o.Password != c.pass || o.DB != c.db ||
				(o.TLS != nil) != c.tls || o.Cluster != c.cluster || o.SentinelMaster != c.master {
				t.Errorf("ParseURL(%q) = addrs %v user %q pass %q db %d tls %v cluster %v master %q", c.in,
					o.Addrs, o.Username, o.Password, o.DB, o.TLS != nil, o.Cluster, o.SentinelMaster)
			}
			if got := o.Address(); got != c.address {
				t.Errorf("ParseURL(%q).Address() = %q, want %q", c.in, got, c.address)
			}
		})
	}
}

func TestParseURLErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", "empty"},
		{"127.0.0.1", "not host:port"},
		{"redis://127.0.0.1:", "port must be"},
		{"redis://127.0.0.1", "not host:port"},
		{"redis://h:0", "port must be"},
		{"redis://h:99999", "port must be"},
		{"http://h:1", "unknown scheme"},
		{"redis://a:1,b:2", "redis-cluster://"},
		{"redis://h:1/x", "database"},
		{"redis://h:1/-1", "database"},
		{"redis-cluster://h:1/3", "only database 0"},
		{"redis-sentinel://h:1", "master=NAME"},
		{"redis://h:1?master=m", "unknown parameter"},
		{"redis://user:topsecret%zz@h:1", "bad %-escape"},
		{"user:topsecret@h:1", "want host:port"},
		{"redis://user:topsecret@h", "not host:port"},
	} {
		t.Run(c.in, func(t *testing.T) {
			_, err := ParseURL(c.in)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("ParseURL(%q) error %v, want one containing %q", c.in, err, c.want)
			}
			if strings.Contains(err.Error(), "topsecret") {
				t.Errorf("ParseURL(%q) error repeats the password: %v", c.in, err)
			}
		})
	}
}

// FuzzParseURL checks that ParseURL never panics, that what it accepts
// reads back the same from Address() (the password aside), and that its
// errors never repeat a password.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"127.0.0.1:6379", "redis://u:p@h:1/2", "rediss://h:1", "redis-cluster://a:1,b:2",
		"redis-sentinel://s:1/0?master=m", "redis://[::1]:1", "x://", "redis://@:", "redis://%zz@h:1"} {
		f.Add(s, "pw")
	}
	f.Fuzz(func(t *testing.T, raw, pass string) {
		o, err := ParseURL(raw)
		if err == nil {
			back, err := ParseURL(o.Address())
			if err != nil {
				t.Fatalf("ParseURL(%q).Address() = %q, which does not parse: %v", raw, o.Address(), err)
			}
			if !slices.Equal(back.Addrs, o.Addrs) || back.Username != o.Username || back.DB != o.DB ||
				(back.TLS != nil) != (o.TLS != nil) || back.Cluster != o.Cluster || back.SentinelMaster != o.SentinelMaster {
				t.Fatalf("ParseURL(%q) and ParseURL(%q) differ: %+v vs %+v", raw, o.Address(), o, back)
			}
			if o.Password != "" && strings.Contains(o.Address(), o.Password) && !strings.Contains(strings.Replace(raw, o.Password, "", 1), o.Password) {
				t.Fatalf("Address() %q shows the password", o.Address())
			}
		}
		// A password placed in a URL never shows in the error.
		const mark = "Zq7"
		if strings.Contains(raw, mark) || strings.ContainsAny(pass, "@") {
			return
		}
		withPass := "redis://user:" + mark + pass + mark + "@" + raw
		if _, err := ParseURL(withPass); err != nil && strings.Contains(err.Error(), mark) {
			t.Fatalf("ParseURL(%q) error shows the password: %v", withPass, err)
		}
	})
}
