package gubernator

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	guber "github.com/gubernator-io/gubernator/v2"
	"google.golang.org/protobuf/encoding/protowire"
)

// Environment of a run against a gubernator that cannot share this test
// binary (scripts/compare-gubernator-current sets them).
const (
	// envReference names a gubernator-reference binary
	// (testdata/reference, built with the gubernator to
	// compare with): the tests run it as the reference instead of the
	// daemon of the version go.mod pins, and move its clock with theirs.
	envReference = "FLOODGATE_GUBERNATOR_REFERENCE"
	// envVersion is gubernator.version for Floodgate beside that
	// reference (default v2.21); beside the pinned daemon it is v2.13.
	envVersion = "FLOODGATE_GUBERNATOR_VERSION"
)

// floodVersion is the gubernator.version Floodgate runs with: the one the
// reference answers as.
func floodVersion() string {
	if os.Getenv(envReference) == "" {
		return "v2.13" // go.mod pins v2.13.0
	}
	if v := os.Getenv(envVersion); v != "" {
		return v
	}
	return "v2.21"
}

// external is a gubernator-reference process: its gRPC and HTTP
// addresses and the endpoint that moves its frozen clock.
type external struct {
	grpc, http, control string
}

// startExternal runs the reference binary at path on a clock frozen at
// start; it ends with the test (its standard input closes).
func startExternal(t *testing.T, path string) *external {
	t.Helper()
	cmd := exec.Command(path, "-start", start.Format(time.RFC3339Nano))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			cmd.Process.Kill()
			<-done
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	e := &external{}
	for _, f := range strings.Fields(line) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "grpc":
			e.grpc = v
		case "http":
			e.http = v
		case "control":
			e.control = v
		}
	}
	if e.grpc == "" || e.http == "" || e.control == "" {
		t.Fatalf("%s answered %q, want ready grpc=... http=... control=...", path, line)
	}
	go io.Copy(io.Discard, stdout)
	return e
}

// advance moves the reference's clock by d.
func (e *external) advance(d time.Duration) error {
	resp, err := http.Post(fmt.Sprintf("http://%s/advance?d=%s", e.control, d), "", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("advance %s: %s %s", d, resp.Status, b)
	}
	return nil
}

// gubernator v2.21.0's fields that v2.13.0's Go types (the client the
// tests use) do not have: they travel as unknown fields.
const (
	fieldMaxWait    = 11 // RateLimitReq.max_wait
	fieldRetryAfter = 7  // RateLimitResp.retry_after
)

// setMaxWait sets q's max_wait (v2.21.0's field 11).
func setMaxWait(q *guber.RateLimitReq, ms int64) {
	b := protowire.AppendTag(nil, fieldMaxWait, protowire.VarintType)
	q.ProtoReflect().SetUnknown(protowire.AppendVarint(b, uint64(ms)))
}

// maxWait returns q's max_wait, 0 when it has none.
func maxWait(q *guber.RateLimitReq) int64 {
	return unknownVarint(q.ProtoReflect().GetUnknown(), fieldMaxWait)
}

// retryAfter returns r's retry_after (v2.21.0's field 7), 0 when absent.
func retryAfter(r *guber.RateLimitResp) int64 {
	return unknownVarint(r.ProtoReflect().GetUnknown(), fieldRetryAfter)
}

// unknownVarint returns the varint field num of the unknown fields b.
func unknownVarint(b []byte, num protowire.Number) int64 {
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return 0
		}
		b = b[l:]
		if n == num && typ == protowire.VarintType {
			v, _ := protowire.ConsumeVarint(b)
			return int64(v)
		}
		l = protowire.ConsumeFieldValue(n, typ, b)
		if l < 0 {
			return 0
		}
		b = b[l:]
	}
	return 0
}
