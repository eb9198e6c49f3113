package rules_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/rules"
)

// Two limits on one request: per member, and for the service as a whole.
// The request passes only if both pass, and each rejection names its rule.
func ExampleEngine_Check() {
	set, err := rules.Parse("rules.yaml", []byte(`
domain: loans
rules:
  - name: per-member
    match: {member: "*"}
    count_by: [member]
    limit: 2
    window: 1m
  - name: service
    count_by: global
    limit: 3
    window: 1m
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	eng := rules.NewEngine(set, memstore.New(memstore.Options{}), rules.WithClock(func() time.Time { return now }))
	for _, member := range []string{"u1", "u1", "u1", "u2", "u3"} {
		res, err := eng.Check(context.Background(), rules.Request{
			Descriptors: []rules.Descriptor{{{Key: "member", Value: member}}},
		})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(member, res.Allowed, res.Rejected)
	}
	// Output:
	// u1 true []
	// u1 true []
	// u1 false [per-member]
	// u2 true []
	// u3 false [service]
}

// Errors name the file and line, say what is wrong and how to fix it.
func ExampleParse_error() {
	_, err := rules.Parse("rules.yaml", []byte(`
domain: loans
rules:
  - name: per-member
    count_by: member
    limit: 20
    window: 1 minute
`))
	fmt.Println(err)
	// Output:
	// rules.yaml:5: rule "per-member": count_by must be a list, such as count_by: [member], or the word global
	// rules.yaml:7: rule "per-member": window "1 minute" is not a duration; write a number with a unit, such as 500ms, 90s, 1m or 24h
}
