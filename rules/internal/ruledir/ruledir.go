// Package ruledir lists the rule files of a directory, as rules.Load reads
// them and package rules/reload watches them.
package ruledir

import (
	"os"
	"path/filepath"
	"strings"
)

// Files lists the rule files rules.Load reads from a directory, in name order:
// its regular .yaml and .yml files that do not start with a dot.
func Files(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
			continue
		}
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() {
			continue // a dangling link, or a directory named like a file
		}
		files = append(files, p)
	}
	return files, nil
}
