package main

import (
	"flag"
	"fmt"
	"io"
	"runtime/debug"
)

// runVersion is "floodgate version" (also --version): the module version,
// the source revision it was built from and the Go version, as the Go
// toolchain recorded them in the binary.
func runVersion(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("floodgate version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: floodgate version\n\n"+
			"Prints the module version, the source revision (VCS commit, its time, and\n"+
			"\"modified\" when built from a tree with uncommitted changes) and the Go version\n"+
			"the binary was built with. Also: floodgate --version.\n")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("version takes no arguments; got %q", fs.Args())
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return fmt.Errorf("version: the binary carries no build information")
	}
	_, err := io.WriteString(stdout, versionText(info))
	return err
}

// versionText formats what "floodgate version" prints from info.
func versionText(info *debug.BuildInfo) string {
	version := info.Main.Version
	if version == "" {
		version = "(unknown)"
	}
	var rev, at, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = " (modified)"
			}
		}
	}
	if rev == "" {
		rev = "unknown (built without version control information, e.g. by go run or go test)"
	} else if at != "" {
		rev += " " + at
	}
	return fmt.Sprintf("floodgate %s\nmodule    %s\nrevision  %s%s\ngo        %s\n",
		version, info.Main.Path, rev, modified, info.GoVersion)
}
