//go:build race

package memtable

// raceEnabled reports whether the race detector is on; tests that measure
// scale down under it, where everything runs many times slower.
const raceEnabled = true
