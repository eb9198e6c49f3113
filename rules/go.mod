module github.com/floodgate-dev/floodgate/rules

go 1.26.0

require (
	github.com/floodgate-dev/floodgate v0.0.0-00010101000000-000000000000
	github.com/fsnotify/fsnotify v1.10.1
	go.yaml.in/yaml/v3 v3.0.6
)

require golang.org/x/sys v0.48.0 // indirect

replace github.com/floodgate-dev/floodgate => ..
