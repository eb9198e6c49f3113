package algorithm_test

import (
	"fmt"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
)

func Example() {
	alg, err := algorithm.New(algorithm.Config{
		Algorithm: algorithm.BoundedLog,
		Limit:     3,
		Window:    time.Second,
	})
	if err != nil {
		panic(err)
	}
	state := make([]int64, alg.Words()) // one key, never seen
	now := int64(time.Hour)
	for i := range 4 {
		d := alg.Decide(state, now+int64(i)*int64(100*time.Millisecond), 1)
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// true 2 0s
	// true 1 0s
	// true 0 0s
	// false 0 700ms
}
