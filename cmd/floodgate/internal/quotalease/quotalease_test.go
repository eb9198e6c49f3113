package quotalease

import (
	"context"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/rlsclient/quotapb"
	"github.com/floodgate-dev/floodgate/rules"
)

const testRules = `
domain: api
rules:
  - name: per-tenant
    match: {tenant: "*"}
    count_by: [tenant]
    limit: 1000
    window: 1m
    leases: true
  - name: plain
    match: {plan: "*"}
    count_by: [plan]
    limit: 2
    window: 1m
`

// serve starts the service on a loopback listener and returns a client.
func serve(t *testing.T) quotapb.QuotaLeasesClient {
	t.Helper()
	set, err := rules.Parse("t.yaml", []byte(testRules))
	if err != nil {
		t.Fatal(err)
	}
	e := rules.NewEngine(set, memstore.New(memstore.Options{}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	New(e, nil).Register(g)
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return quotapb.NewQuotaLeasesClient(conn)
}

func entries(kv ...string) []*quotapb.Entry {
	var out []*quotapb.Entry
	for _, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		out = append(out, &quotapb.Entry{Key: []byte(k), Value: []byte(v)})
	}
	return out
}

func TestLeaseTakeSpendGiveBack(t *testing.T) {
	c := serve(t)
	ctx := context.Background()
	resp, err := c.Lease(ctx, &quotapb.LeaseRequest{Domain: "api", Ops: []*quotapb.LeaseOp{
		{Entries: entries("tenant=acme"), Need: 1, Target: 100},
		{Entries: entries("plan=free"), Need: 1, Target: 100},
		{Entries: entries("other=x"), Need: 1, Target: 100},
	}})
	if err != nil {
		t.Fatal(err)
	}
	g := resp.Grants[0]
	if !g.Allowed || g.Lease == "" || g.Held != 100 || g.Granted != 100 || g.Ttl.AsDuration() <= 0 || g.Limit != 1000 || g.Remaining != 899 || g.NoLease != "" {
		t.Fatalf("leased key: %v", g)
	}
	if p := resp.Grants[1]; !p.Allowed || p.Lease != "" || p.Held != 0 || !strings.Contains(p.NoLease, "no leases: true") || p.Limit != 2 || p.Remaining != 1 {
		t.Fatalf("plain key: %v", p)
	}
	if u := resp.Grants[2]; !u.Allowed || !u.Unmatched || u.NoLease == "" {
		t.Fatalf("unmatched key: %v", u)
	}
	// 60 spent, topped up again; sent again after a lost answer, applied once.
	op := &quotapb.LeaseOp{Entries: entries("tenant=acme"), Lease: g.Lease, Seq: 2, Spent: 60, Target: 100}
	var first *quotapb.Grant
	for i := range 2 {
		resp, err = c.Lease(ctx, &quotapb.LeaseRequest{Domain: "api", Ops: []*quotapb.LeaseOp{op}})
		if err != nil {
			t.Fatal(err)
		}
		r := resp.Grants[0]
		if i == 0 {
			first = r
			if r.Held != 100 || r.Granted != 60 || r.Remaining != 839 || r.Repeat {
				t.Fatalf("top up: %v", r)
			}
		} else if !r.Repeat || r.Held != first.Held || r.Remaining != first.Remaining {
			t.Fatalf("the op sent again: %v, first %v", r, first)
		}
	}
	// The rest given back: 61 counted.
	resp, err = c.Lease(ctx, &quotapb.LeaseRequest{Domain: "api", Ops: []*quotapb.LeaseOp{{Entries: entries("tenant=acme"), Lease: g.Lease, Seq: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.Grants[0]; r.Held != 0 || r.Remaining != 939 || r.Lease != "" {
		t.Fatalf("give back: %v", r)
	}
}

func TestLeaseMalformed(t *testing.T) {
	c := serve(t)
	for _, in := range []*quotapb.LeaseRequest{
		{Ops: []*quotapb.LeaseOp{{Entries: entries("tenant=a")}}},
		{Domain: "api"},
		{Domain: "api", Ops: []*quotapb.LeaseOp{{}}},
		{Domain: "api", Ops: []*quotapb.LeaseOp{{Entries: entries("=a")}}},
		{Domain: "api", Ops: []*quotapb.LeaseOp{{Entries: entries("tenant=a"), Lease: "zz", Seq: 1}}},
		{Domain: "api", Ops: []*quotapb.LeaseOp{{Entries: entries("tenant=a"), Lease: "0123456789ab0123456789ab", Seq: 0}}},
		{Domain: "api", Ops: []*quotapb.LeaseOp{{Entries: entries("tenant=a"), Spent: 3}}},
		{Domain: "api", Ops: []*quotapb.LeaseOp{{Entries: entries("tenant=a"), Need: 1 << 40}}},
	} {
		_, err := c.Lease(context.Background(), in)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: got %v, want InvalidArgument", in, err)
		}
	}
}

func FuzzParseOp(f *testing.F) {
	f.Add("tenant", "acme", "", uint64(0), uint64(0), uint64(1), uint64(10))
	f.Add("", "", "0123456789ab0123456789ab", uint64(3), uint64(5), uint64(0), uint64(0))
	f.Add("k", "\xff", "0123456789ab0123456789aZ", uint64(1<<62), uint64(1), uint64(1), uint64(1))
	f.Fuzz(func(t *testing.T, key, value, lease string, seq, spent, need, target uint64) {
		op := &quotapb.LeaseOp{Entries: []*quotapb.Entry{{Key: []byte(key), Value: []byte(value)}}, Lease: lease, Seq: seq, Spent: spent, Need: need, Target: target}
		req, n, hop, err := parseOp("api", op)
		if err != nil {
			return
		}
		if !hop.ID.Valid() || hop.Seq < 1 || n < 0 || hop.Spent < 0 || hop.Target < 0 || len(req.Descriptors) != 1 {
			t.Fatalf("accepted %v as %+v, %d, %+v", op, req, n, hop)
		}
	})
}
