package algorithm

import "fmt"

// newAlgorithm builds the algorithm c names; c.Limit and c.Window are checked.
func newAlgorithm(c Config) (Algorithm, error) {
	switch c.Algorithm {
	default:
		return nil, fmt.Errorf("%w %q: want one of %v", ErrUnknown, c.Algorithm, Names)
	}
}
