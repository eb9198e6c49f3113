module github.com/floodgate-dev/floodgate/httplimit

go 1.23.0

replace (
	github.com/floodgate-dev/floodgate => ..
	github.com/floodgate-dev/floodgate/distributed => ../distributed
	github.com/floodgate-dev/floodgate/gateway => ../gateway
	github.com/floodgate-dev/floodgate/grpclimit => ../grpclimit
	github.com/floodgate-dev/floodgate/internal/envoycompat => ../internal/envoycompat
	github.com/floodgate-dev/floodgate/internal/server => ../internal/server
	github.com/floodgate-dev/floodgate/redisstore => ../redisstore
	github.com/floodgate-dev/floodgate/rls => ../rls
	github.com/floodgate-dev/floodgate/rlsclient => ../rlsclient
	github.com/floodgate-dev/floodgate/rules => ../rules
)

require github.com/floodgate-dev/floodgate v0.0.0-00010101000000-000000000000
