package envoyratelimit

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/floodgate-dev/floodgate/rules"
)

// TestReferenceConfigsLoad loads every YAML rule file of the reference's
// (one by one, and each runtime directory as a whole) with the reference's
// loader and with Floodgate's, and compares which are accepted. Files the
// reference loads and Floodgate refuses are listed in ownModeRefused with
// the reason; any other such file fails the test.
func TestReferenceConfigsLoad(t *testing.T) {
	type unit struct {
		name  string
		files []configFile
	}
	var units []unit
	for _, f := range allConfigFiles(t) {
		units = append(units, unit{f.origin, []configFile{f}})
	}
	for _, dir := range []string{"examples/ratelimit/config", "test/integration/runtime/current/ratelimit/config"} {
		units = append(units, unit{dir + "/", yamlFiles(t, dir)})
	}
	refLoads, refused, looser := 0, 0, 0
	for _, u := range units {
		refErr := referenceLoads(u.files)
		recorder.recordLoad(u.name, u.files, refErr)
		layout := writeRuntime(t, configSet{name: u.name, files: u.files})
		path := layout.configDir()
		if len(u.files) == 1 {
			entries, _ := os.ReadDir(path)
			path = filepath.Join(path, entries[0].Name())
		}
		_, fgErr := rules.Load(path)
		switch {
		case refErr == nil && fgErr != nil:
			refLoads++
			refused++
			if reason, ok := ownModeRefused[u.name]; ok {
				t.Logf("known: Floodgate refuses %s (%s): %v", u.name, reason, fgErr)
			} else {
				t.Errorf("the reference loads %s, Floodgate refuses it: %v", u.name, fgErr)
			}
		case refErr == nil:
			refLoads++
			if _, ok := ownModeRefused[u.name]; ok {
				t.Logf("%s loads now: it can leave ownModeRefused", u.name)
			}
		case fgErr == nil:
			looser++
			t.Logf("the reference refuses %s (%v), Floodgate loads it", u.name, refErr)
		}
	}
	t.Logf("%d files and directories: the reference loads %d, Floodgate refuses %d of those and loads %d the reference refuses",
		len(units), refLoads, refused, looser)
}

// ownModeRefused are the reference's valid files Floodgate's own mode
// refuses, with the reason: none.
var ownModeRefused = map[string]string{}
