module github.com/floodgate-dev/floodgate

go 1.25.0
