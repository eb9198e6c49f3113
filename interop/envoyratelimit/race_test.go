//go:build race

package envoyratelimit

// raceDetector reports whether the tests run with -race.
const raceDetector = true
