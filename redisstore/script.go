package redisstore

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"strings"
)

// The decision script is one Lua script, kept as one file per part under
// lua/: each algorithm's file is named after its Go twin in package
// algorithm (fixedwindow.lua beside algorithm/fixedwindow.go), and each
// operation has a file of its own. They are joined, in the order below,
// when the package is built; the joined text is what Redis loads and
// knows by scriptSHA.
//
//go:embed lua/*.lua
var luaFiles embed.FS

// scriptHead, scriptAlgorithms and scriptOps name the files of lua/ in the
// order they are joined. The algorithm files are the branches of build,
// which the join opens before them and closes after them.
var (
	scriptHead       = []string{"prelude.lua", "boundedlog_light.lua"}
	scriptAlgorithms = []string{
		"fixedwindow.lua", "slidingwindow.lua", "weightedwindow.lua", "slidinglog.lua",
		"bucket.lua", "leakybucket.lua", "concurrency.lua", "boundedlog.lua", "calendar.lua",
		"gubernator.lua",
	}
	scriptOps = []string{"hold.lua", "state.lua", "op_members.lua", "op_exchange.lua", "op_hold.lua", "op_shared.lua", "op_sync.lua", "op_decide.lua"}
)

// buildOpen and buildClose wrap the algorithm files in build.
const (
	buildOpen = `-- build returns the functions of the algorithm with the given code (nil
-- for an unknown code), made on first use in a call. The script's body runs
-- on every call, and each closure it makes costs time in proportion to its
-- upvalues; one builder holding every algorithm makes one closure per call
-- where a table of builders made one per algorithm, which measured about 2
-- µs of Redis CPU per call.
local function build(code)

`
	buildClose = "end\n\n"
)

// script is the joined decision script.
var script = joinScript()

// scriptSHA is the SHA-1 Redis knows the script by.
var scriptSHA = func() string {
	h := sha1.Sum([]byte(script))
	return hex.EncodeToString(h[:])
}()

// joinScript joins the files of lua/ into one script.
func joinScript() string {
	var b strings.Builder
	add := func(names []string) {
		for _, name := range names {
			text, err := luaFiles.ReadFile("lua/" + name)
			if err != nil {
				panic("redisstore: " + err.Error()) // a file named above is missing: a build mistake
			}
			b.Write(text)
		}
	}
	add(scriptHead)
	b.WriteString(buildOpen)
	add(scriptAlgorithms)
	b.WriteString(buildClose)
	add(scriptOps)
	return b.String()
}
