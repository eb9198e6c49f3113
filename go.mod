module github.com/floodgate-dev/floodgate

go 1.23.0
