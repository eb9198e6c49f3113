//go:build !race

package server

// raceEnabled reports a -race build, whose decisions run several times
// slower.
const raceEnabled = false
