package reload

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/rules"
)

// configMapDir lays out dir as the kubelet mounts a ConfigMap volume: each
// key is a symlink "rules.yaml -> ..data/rules.yaml", "..data" is a symlink
// to a timestamped directory holding the files, and an update writes a new
// timestamped directory, points "..data_tmp" at it, renames "..data_tmp"
// over "..data" (atomically) and removes the old directory. swap performs
// one such update.
type configMapDir struct {
	t   *testing.T
	dir string
	gen int
	cur string
}

func newConfigMapDir(t *testing.T, files map[string]string) *configMapDir {
	c := &configMapDir{t: t, dir: t.TempDir()}
	c.swap(files)
	for name := range files {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(c.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func (c *configMapDir) swap(files map[string]string) {
	c.t.Helper()
	c.gen++
	ts := fmt.Sprintf("..2026_12_01_04_00_%02d.%09d", c.gen, c.gen)
	if err := os.Mkdir(filepath.Join(c.dir, ts), 0o755); err != nil {
		c.t.Fatal(err)
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(c.dir, ts, name), []byte(text), 0o644); err != nil {
			c.t.Fatal(err)
		}
	}
	tmp := filepath.Join(c.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		c.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(c.dir, "..data")); err != nil {
		c.t.Fatal(err)
	}
	if c.cur != "" {
		if err := os.RemoveAll(filepath.Join(c.dir, c.cur)); err != nil {
			c.t.Fatal(err)
		}
	}
	c.cur = ts
}

// A rule file mounted from a Kubernetes ConfigMap is reloaded when the
// ConfigMap changes: the file itself is never written, only the ..data
// symlink is swapped.
func TestWatchConfigMapSymlinkSwap(t *testing.T) {
	cm := newConfigMapDir(t, map[string]string{"rules.yaml": limitFile(3, "")})
	path := filepath.Join(cm.dir, "rules.yaml")
	set, err := rules.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	e := rules.NewEngine(set, memstore.New(memstore.Options{}))
	logs, stop := startWatch(t, path, e)
	defer stop()

	for i, limit := range []int{5, 7} {
		cm.swap(map[string]string{"rules.yaml": limitFile(limit, "")})
		waitFor(t, fmt.Sprintf("reload %d after the ..data swap", i+1), func() bool {
			rs := e.Set().Rules()
			return len(rs) == 2 && rs[0].Limit == int64(limit)
		})
	}
	// A broken update keeps the rules in force.
	before := e.Set()
	cm.swap(map[string]string{"rules.yaml": "domain: d\nrules: [\n"})
	waitFor(t, "the failed reload's log", func() bool { return strings.Contains(logs.String(), "reload failed") })
	if e.Set() != before {
		t.Fatal("a broken ConfigMap update replaced the rules")
	}
}

// A directory of rule files mounted from a ConfigMap (serve --rules DIR)
// is reloaded the same way, and the hidden ..data entries are not read as
// rule files.
func TestWatchConfigMapDirectory(t *testing.T) {
	cm := newConfigMapDir(t, map[string]string{"a.yaml": limitFile(3, ""), "b.yaml": "domain: other\nrules:\n  - name: r\n    count_by: global\n    limit: 1\n    window: 1s\n"})
	set, err := rules.Load(cm.dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := set.Domains(); len(got) != 2 {
		t.Fatalf("domains %v, want d and other", got)
	}
	e := rules.NewEngine(set, memstore.New(memstore.Options{}))
	_, stop := startWatch(t, cm.dir, e)
	defer stop()
	cm.swap(map[string]string{"a.yaml": limitFile(9, ""), "b.yaml": "domain: other\nrules:\n  - name: r\n    count_by: global\n    limit: 2\n    window: 1s\n"})
	waitFor(t, "reload after the ..data swap", func() bool {
		rs := e.Set().Rules()
		return len(rs) == 3 && rs[0].Limit == 9 && rs[2].Limit == 2
	})
}
