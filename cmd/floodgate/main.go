// Command floodgate is Floodgate's single binary: the rate-limit server, the
// rule checker, the load generator, and the simulator and verifier that drive
// the real limiter under a virtual clock.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	// The zone database is part of the binary: calendar rules name IANA
	// zones, and the container image (FROM scratch) has no /usr/share/zoneinfo.
	_ "time/tzdata"
)

// command is one subcommand: its one-line summary and the function that runs
// it with the arguments after its name.
type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{
	"serve":   {"run the rate-limit server (HTTP, gRPC RLS, gateway)", runServe},
	"version": {"print the module version, source revision and Go version", runVersion},
	"check":   {"validate a rule file and show each rule's effective cap and route coverage", runCheck},
	"load":    {"generate load against a gRPC or HTTP front end", runLoad},
	"verify":  {"replay a CSV trace through an algorithm and report the promise's measures", runVerify},
	"sim":     {"simulations: window, worst, keys, distributed, coverage, tokens", runSim},
}

var simCommands = map[string]command{
	"window":      {"three traffic patterns (uniform 2x, piled at boundary, spaced at the limit) through every algorithm", runSimWindow},
	"worst":       {"search for traffic that breaks an algorithm's promises", runSimWorst},
	"keys":        {"which entry to count by: a published key-selection table through the rule engine", runSimKeys},
	"distributed": {"centralized, split and delayed arrangements with real limiter nodes", runSimDistributed},
	"coverage":    {"which requests a gateway and a middleware limit see, with the real ones", runSimCoverage},
	"tokens":      {"a token budget charged after the response: forgiven, settled, reserved", runSimTokens},
}

func main() {
	var err error
	if invokedAsReference(os.Args[0]) {
		// /bin/ratelimit in an image made for envoyproxy/ratelimit: its
		// environment configures everything, as there.
		err = runReference(os.Args[1:], os.LookupEnv, os.Stderr)
	} else {
		err = dispatch(os.Args[1:], os.Stdout, os.Stderr)
	}
	if err == nil {
		return
	}
	var exit exitError
	if errors.As(err, &exit) {
		os.Exit(exit.code)
	}
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0) // -h: the command printed its synopsis
	}
	fmt.Fprintln(os.Stderr, "floodgate:", err)
	os.Exit(2)
}

// exitError ends the program with a status code without printing anything
// more (the command has already said what went wrong).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// dispatch runs the command args name. Without a command it prints the
// usage and fails (exit status 2); "help", -h and --help print it and
// succeed, as "version" and --version print the version.
func dispatch(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "help":
			args[0] = "-h"
		case "--version", "-version":
			return runVersion(args[1:], stdout, stderr)
		}
	}
	return runCommand(args, stdout, stderr, "floodgate", "command", commands)
}

func runSim(args []string, stdout, stderr io.Writer) error {
	return runCommand(args, stdout, stderr, "floodgate sim", "simulation", simCommands)
}

// runCommand runs the command of cmds that args[0] names with the rest of
// args; with -h it lists cmds, and with no name it lists them and fails.
// what names a command in the error for an unknown one.
func runCommand(args []string, stdout, stderr io.Writer, prefix, what string, cmds map[string]command) error {
	if len(args) == 0 {
		usage(stderr, prefix, cmds)
		return exitError{2}
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		usage(stdout, prefix, cmds)
		return nil
	}
	c, ok := cmds[args[0]]
	if !ok {
		usage(stderr, prefix, cmds)
		return fmt.Errorf("unknown %s %q", what, args[0])
	}
	return c.run(args[1:], stdout, stderr)
}

func usage(w io.Writer, prefix string, cmds map[string]command) {
	names := slices.Sorted(maps.Keys(cmds))
	fmt.Fprintf(w, "usage: %s COMMAND [flags]\n\ncommands:\n", prefix)
	for _, n := range names {
		fmt.Fprintf(w, "  %-12s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintf(w, "\nRun '%s COMMAND -h' for a command's flags.\n", strings.TrimSpace(prefix))
}
