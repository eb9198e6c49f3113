module github.com/floodgate-dev/floodgate/bench

go 1.26.8

replace github.com/floodgate-dev/floodgate => ../

require github.com/floodgate-dev/floodgate v0.0.0-00010101000000-000000000000

require (
	github.com/hashicorp/golang-lru v0.5.4 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/sethvargo/go-limiter v0.7.1 // indirect
	github.com/throttled/throttled/v2 v2.15.0 // indirect
	github.com/ulule/limiter/v3 v3.11.2 // indirect
	golang.org/x/time v0.16.0 // indirect
)
