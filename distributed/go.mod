module github.com/floodgate-dev/floodgate/distributed

go 1.26.0

require (
	github.com/floodgate-dev/floodgate v0.0.0-00010101000000-000000000000
	github.com/floodgate-dev/floodgate/redisstore v0.0.0-00010101000000-000000000000
)

require (
	github.com/redis/rueidis v1.0.79 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

replace (
	github.com/floodgate-dev/floodgate => ..
	github.com/floodgate-dev/floodgate/redisstore => ../redisstore
)
