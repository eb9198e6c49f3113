package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
	"github.com/floodgate-dev/floodgate/store"
)

// decideN runs n decisions on distinct keys from 8 goroutines and returns
// the first error.
func decideN(t *testing.T, st *Store, n int) error {
	t.Helper()
	alg := mustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 1000, Window: time.Minute})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += 8 {
				d, err := st.DecideOne(context.Background(), time.Now().UnixNano(), store.Request{Algorithm: alg, Key: fmt.Sprint("k", i), Cost: 1})
				if err == nil && !d.Allowed {
					err = fmt.Errorf("decision %d rejected: %s", i, d.Reason)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// TestRequirePass connects to a redis-server started with --requirepass,
// by password alone and as an ACL user with a database, and checks that a
// wrong password fails with an error that names the store but not the
// password.
func TestRequirePass(t *testing.T) {
	const pw = "pw-Gh4sT-9"
	srv := redistest.StartWithPassword(t, pw)
	ctx := context.Background()
	o, err := ParseURL("redis://:" + pw + "@" + srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	st := newStore(t, o)
	if err := decideN(t, st, 50); err != nil {
		t.Fatal(err)
	}

	if _, err := srv.Do("ACL", "SETUSER", "limiter", "on", ">user-pw-77", "~*", "+@all"); err != nil {
		t.Fatal(err)
	}
	o, err = ParseURL("redis://limiter:user-pw-77@" + srv.Addr() + "/3")
	if err != nil {
		t.Fatal(err)
	}
	if err := decideN(t, newStore(t, o), 8); err != nil {
		t.Fatal(err)
	}
	if ks, err := srv.Do("INFO", "keyspace"); err != nil || !strings.Contains(ks, "db3:keys=8") {
		t.Fatalf("INFO keyspace = %q, %v; want the 8 keys in db3", ks, err)
	}

	o.Password = "wrong-" + pw
	_, err = New(ctx, o)
	if err == nil {
		t.Fatal("New with a wrong password succeeded")
	}
	msg := err.Error()
	if strings.Contains(msg, pw) || !strings.Contains(msg, srv.Addr()) || !strings.Contains(msg, "WRONGPASS") {
		t.Fatalf("wrong password error %q: want WRONGPASS and the address, without the password", msg)
	}
	t.Logf("wrong password: %v", err)

	o.ConnectLater = true
	late, err := New(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	if err := late.Ping(ctx); !errors.Is(err, ErrNotConnected) || strings.Contains(err.Error(), pw) {
		t.Fatalf("Ping on a store with a wrong password = %v, want ErrNotConnected without the password", err)
	}
}

// TestTLS connects over TLS to a redis-server that demands a client
// certificate, with certificates made by the test.
func TestTLS(t *testing.T) {
	srv, files := redistest.StartTLS(t, true)
	ctx := context.Background()
	o, err := ParseURL("rediss://" + srv.TLSAddr())
	if err != nil {
		t.Fatal(err)
	}
	o.TLS = files.ClientTLS(t, true, "")
	st := newStore(t, o)
	if err := decideN(t, st, 50); err != nil {
		t.Fatal(err)
	}
	if got := st.Address(); got != "rediss://"+srv.TLSAddr() {
		t.Errorf("Address() = %q", got)
	}
	o.Timeout = 500 * time.Millisecond

	noCert := o
	noCert.TLS = files.ClientTLS(t, false, "")
	if _, err := New(ctx, noCert); err == nil {
		t.Error("TLS without the client certificate the server demands succeeded")
	}
	otherCA := o
	other := redistest.MakeCertificates(t, t.TempDir())
	other.ClientCert, other.ClientKey = files.ClientCert, files.ClientKey
	otherCA.TLS = other.ClientTLS(t, true, "")
	if _, err := New(ctx, otherCA); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("TLS to a server whose certificate another CA signed: %v, want a certificate error", err)
	}
	wrongName := o
	wrongName.TLS = files.ClientTLS(t, true, "redis.example")
	if _, err := New(ctx, wrongName); err == nil {
		t.Error("TLS with a server name the certificate does not carry succeeded")
	}
	plain := o
	plain.TLS = nil
	if _, err := New(ctx, plain); err == nil {
		t.Error("plain text to the TLS port succeeded")
	}
}

// TestScriptPreloaded checks that a new store loads its script before it
// decides, so that no decision sends the script's text, and that after
// SCRIPT FLUSH the store loads it again once, by SHA, for all callers.
func TestScriptPreloaded(t *testing.T) {
	srv := redistest.Start(t)
	o, err := ParseURL(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	st := newStore(t, o)
	if r, err := srv.Do("SCRIPT", "EXISTS", scriptSHA); err != nil || r != "1" {
		t.Fatalf("SCRIPT EXISTS after New = %q, %v; want 1", r, err)
	}
	if err := decideN(t, st, 400); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{{"SCRIPT", "FLUSH"}, {"CONFIG", "RESETSTAT"}} {
		if _, err := srv.Do(cmd...); err != nil {
			t.Fatal(err)
		}
	}
	if err := decideN(t, st, 400); err != nil {
		t.Fatal(err)
	}
	stats, err := srv.Do("INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stats, "cmdstat_eval:") {
		t.Errorf("the script's text was sent with EVAL:\n%s", stats)
	}
	if n := st.ScriptLoads(); n != 1 {
		t.Errorf("%d reload rounds after one SCRIPT FLUSH, want 1", n)
	}
	for _, l := range strings.Split(stats, "\n") {
		if strings.HasPrefix(l, "cmdstat_evalsha") || strings.HasPrefix(l, "cmdstat_script") {
			t.Log(l)
		}
	}
}

// TestSentinelFailover connects through Redis Sentinel, kills the primary
// while decisions run, and checks that decisions succeed again on the
// promoted replica.
func TestSentinelFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a Sentinel failover")
	}
	set := redistest.StartSentinel(t, "fgmain", time.Second)
	o, err := ParseURL("redis-sentinel://" + strings.Join(set.Addrs(), ",") + "?master=fgmain")
	if err != nil {
		t.Fatal(err)
	}
	o.Timeout = 300 * time.Millisecond
	st := newStore(t, o)
	if err := decideN(t, st, 100); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	set.Primary.Kill()
	set.WaitFailover(30 * time.Second)
	promoted := time.Since(killed)
	var lastErr error
	deadline := time.Now().Add(15 * time.Second)
	for {
		if lastErr = decideN(t, st, 100); lastErr == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("decisions still fail 15s after the failover: %v", lastErr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("primary killed; replica promoted after %v; decisions succeed %v after the kill; script reloads: %d",
		promoted.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond), st.ScriptLoads())
	if keys, err := set.Replica.Do("DBSIZE"); err != nil || keys == "0" {
		t.Errorf("DBSIZE on the promoted replica = %q, %v; want the counters there", keys, err)
	}
}

// TestSentinelPasswords connects through a sentinel that requires its own
// password to a primary that requires another, given as the URL's password
// and Options.SentinelPassword.
func TestSentinelPasswords(t *testing.T) {
	set := redistest.StartSentinelAuth(t, "fgauth", time.Second, "data-pw-1", "sentinel-pw-2")
	o, err := ParseURL("redis-sentinel://:data-pw-1@" + set.Sentinel.Addr() + "/1?master=fgauth")
	if err != nil {
		t.Fatal(err)
	}
	o.SentinelPassword = "sentinel-pw-2"
	if err := decideN(t, newStore(t, o), 40); err != nil {
		t.Fatal(err)
	}
	if ks, err := set.Primary.Do("INFO", "keyspace"); err != nil || !strings.Contains(ks, "db1:keys=40") {
		t.Fatalf("INFO keyspace on the primary = %q, %v; want the 40 keys in db1", ks, err)
	}
	o.SentinelPassword = "wrong"
	o.Timeout = 500 * time.Millisecond
	if _, err := New(context.Background(), o); err == nil || strings.Contains(err.Error(), "data-pw-1") {
		t.Fatalf("New with a wrong sentinel password: %v", err)
	}
}
