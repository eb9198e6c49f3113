package grpclimit

import (
	"context"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// DefaultMaxWait is how long WaitRetry waits in all for a call without a
// deadline.
const DefaultMaxWait = 30 * time.Second

// WaitRetry returns a unary client interceptor that, when a call fails
// with codes.ResourceExhausted and a google.rpc.RetryInfo detail, waits the
// advised delay and tries again, at most attempts times in all (attempts
// below 2 means 2). It waits only when the retry can start before the
// call's deadline (DefaultMaxWait from the first attempt for a call
// without one); otherwise it returns the error at once, so a caller never
// waits for a retry that could not finish.
func WaitRetry(attempts int) grpc.UnaryClientInterceptor {
	attempts = max(attempts, 2)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		deadline, ok := ctx.Deadline()
		if !ok {
			deadline = time.Now().Add(DefaultMaxWait)
		}
		var err error
		for i := 0; i < attempts; i++ {
			if err = invoker(ctx, method, req, reply, cc, opts...); err == nil {
				return nil
			}
			delay, ok := RetryDelay(err)
			if !ok || i == attempts-1 || time.Now().Add(delay).After(deadline) {
				return err
			}
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return err
			}
		}
		return err
	}
}

// RetryDelay returns the delay a ResourceExhausted error's RetryInfo
// detail advises, and whether it has one.
func RetryDelay(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted {
		return 0, false
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			return max(0, ri.GetRetryDelay().AsDuration()), true
		}
	}
	return 0, false
}
