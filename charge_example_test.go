package floodgate_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-dev/floodgate"
)

// A token budget whose cost is known only after the response: check
// before the call, charge the tokens it used after. The second answer
// takes the tenant past its budget; it is then in debt, and rejected until
// the tokens that took it over have left the window.
func ExampleLimiter_Charge() {
	now := time.Unix(1000, 0)
	lim, _ := floodgate.New(floodgate.Limit{Limit: 10_000, Window: time.Minute},
		floodgate.WithClock(func() time.Time { return now }))
	ctx := context.Background()
	for _, used := range []int64{6000, 6000, 6000} {
		d, _ := lim.Check(ctx, "tenant-a")
		if !d.Allowed {
			fmt.Printf("rejected, retry after %v\n", d.RetryAfter)
			continue
		}
		// ... call the model; it answers with `used` tokens ...
		d, _ = lim.Charge(ctx, "tenant-a", used)
		fmt.Printf("charged %d, %d left\n", used, d.Remaining)
		now = now.Add(time.Second)
	}
	// Output:
	// charged 6000, 4000 left
	// charged 6000, 0 left
	// rejected, retry after 58s
}

// Prepaying an estimate before the call keeps concurrent calls within the
// budget; Settle charges what the call used beyond it.
func ExampleLimiter_Prepay() {
	lim, _ := floodgate.New(floodgate.Limit{Limit: 10_000, Window: time.Minute})
	ctx := context.Background()
	r, _ := lim.Prepay(ctx, "tenant-a", 4000) // the request's max_tokens, say
	if !r.Decision.Allowed {
		return
	}
	d, _ := r.Settle(ctx, 4500) // it used 500 more than prepaid
	fmt.Println(d.Remaining)
	// Output:
	// 5500
}
