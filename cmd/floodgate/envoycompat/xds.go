package envoycompat

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/tlsfiles"
)

// Config sources (CONFIG_TYPE), lower case as ParseSettings keeps them.
const (
	configTypeFile = "file"
	configTypeXDS  = "grpc_xds_sotw"
)

// rateLimitConfigType is the type URL of the resources the xDS server
// pushes: envoyproxy/ratelimit's RateLimitConfig.
const rateLimitConfigType = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// XDSSettings are the CONFIG_GRPC_XDS_* and XDS_CLIENT_* variables: where
// the rules come from with CONFIG_TYPE=GRPC_XDS_SOTW.
type XDSSettings struct {
	ServerURL    string
	NodeID       string
	NodeMetadata string // key=value,key=value
	// Headers are CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS (key:value,...),
	// sent as gRPC metadata on the stream.
	Headers map[string]string
	// ConnectRetryInterval is accepted for compatibility; reconnecting is
	// paced by the backoff below.
	ConnectRetryInterval time.Duration

	UseTLS                        bool
	ClientCert, ClientKey, CACert string
	ServerName                    string // CONFIG_GRPC_XDS_SERVER_TLS_SAN
	BackoffInitial, BackoffMax    time.Duration
	BackoffFactor                 float64
	BackoffJitter                 bool
	MaxRecvMsgSize                int
}

// headerMap parses key:value,key:value as envconfig reads a map.
func headerMap(dst func(*Settings) *map[string]string) func(*Settings, string) error {
	return func(s *Settings, v string) error {
		m := map[string]string{}
		for _, pair := range strings.Split(v, ",") {
			if strings.TrimSpace(pair) == "" {
				continue
			}
			k, val, ok := strings.Cut(pair, ":")
			if !ok || strings.TrimSpace(k) == "" {
				return fmt.Errorf("%q is not key:value,key:value", clip(v))
			}
			m[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(val)
		}
		*dst(s) = m
		return nil
	}
}

// xdsSettings are the rows of the xDS variables, with the reference's
// defaults.
var xdsSettings = []setting{
	{"CONFIG_TYPE", "FILE", oneOf(func(s *Settings) *string { return &s.ConfigType }, configTypeFile, configTypeXDS)},
	{"FORCE_START_WITHOUT_INITIAL_CONFIG", "false", boolean(func(s *Settings) *bool { return &s.ForceStart })},
	{"CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000", str(func(s *Settings) *string { return &s.XDS.ServerURL })},
	{"CONFIG_GRPC_XDS_NODE_ID", "default", str(func(s *Settings) *string { return &s.XDS.NodeID })},
	{"CONFIG_GRPC_XDS_NODE_METADATA", "", str(func(s *Settings) *string { return &s.XDS.NodeMetadata })},
	{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "", headerMap(func(s *Settings) *map[string]string { return &s.XDS.Headers })},
	{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "3s", duration(func(s *Settings) *time.Duration { return &s.XDS.ConnectRetryInterval })},
	{"CONFIG_GRPC_XDS_SERVER_USE_TLS", "false", boolean(func(s *Settings) *bool { return &s.XDS.UseTLS })},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "", str(func(s *Settings) *string { return &s.XDS.ClientCert })},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "", str(func(s *Settings) *string { return &s.XDS.ClientKey })},
	{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "", str(func(s *Settings) *string { return &s.XDS.CACert })},
	{"CONFIG_GRPC_XDS_SERVER_TLS_SAN", "", str(func(s *Settings) *string { return &s.XDS.ServerName })},
	{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "10s", duration(func(s *Settings) *time.Duration { return &s.XDS.BackoffInitial })},
	{"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "60s", duration(func(s *Settings) *time.Duration { return &s.XDS.BackoffMax })},
	{"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "0.5", func(s *Settings, v string) error {
		f, err := parseFloat(v)
		if err != nil || f < 0 || f > 1e3 {
			return fmt.Errorf("%q is not a factor from 0 to 1000", clip(v))
		}
		s.XDS.BackoffFactor = f
		return nil
	}},
	{"XDS_CLIENT_BACKOFF_JITTER", "true", boolean(func(s *Settings) *bool { return &s.XDS.BackoffJitter })},
	{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "0", integer(func(s *Settings) *int { return &s.XDS.MaxRecvMsgSize }, 0, math.MaxInt32)},
}

// checkConfigSource refuses what the chosen config source cannot do: a
// start without rules is only possible when they are pushed.
func checkConfigSource(s Settings) error {
	if s.ForceStart && s.ConfigType == configTypeFile {
		return errors.New("FORCE_START_WITHOUT_INITIAL_CONFIG=true: a start with CONFIG_TYPE=FILE needs its rule files; unset it")
	}
	if s.ConfigType == configTypeXDS && strings.TrimSpace(s.XDS.ServerURL) == "" {
		return errors.New("CONFIG_GRPC_XDS_SERVER_URL is empty: give the xDS server's host:port")
	}
	return nil
}

// xdsTLS is the client TLS configuration the CONFIG_GRPC_XDS_* files ask
// for: the server's certificate checked against the CA file (else the
// system's roots) and, when set, CONFIG_GRPC_XDS_SERVER_TLS_SAN as its name;
// the client certificate presented when given.
func xdsTLS(x XDSSettings) (*tls.Config, error) {
	c, err := tlsfiles.Load(x.CACert, x.ClientCert, x.ClientKey, x.ServerName)
	if err != nil {
		return nil, fmt.Errorf("CONFIG_GRPC_XDS_SERVER_USE_TLS: %v (CONFIG_GRPC_XDS_SERVER_TLS_CACERT, CONFIG_GRPC_XDS_CLIENT_TLS_CERT/KEY)", err)
	}
	return c, nil
}

// xdsClient subscribes to RateLimitConfig resources over an aggregated
// (ADS) state-of-the-world stream. Each response is handed to apply as one
// set of rule files: a set that applies is ACKed with its version, one that
// does not is NACKed with the error and the last good version.
type xdsClient struct {
	set   XDSSettings
	log   *slog.Logger
	node  *corev3.Node
	opts  []grpc.DialOption
	apply func([]File) error
}

func newXDSClient(x XDSSettings, log *slog.Logger, apply func([]File) error) (*xdsClient, error) {
	creds := insecure.NewCredentials()
	if x.UseTLS {
		tc, err := xdsTLS(x)
		if err != nil {
			return nil, err
		}
		creds = credentials.NewTLS(tc)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if x.MaxRecvMsgSize > 0 {
		opts = append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(x.MaxRecvMsgSize)))
	}
	return &xdsClient{set: x, log: log, node: xdsNode(x), opts: opts, apply: apply}, nil
}

// xdsNode is the node the client presents: CONFIG_GRPC_XDS_NODE_ID and the
// key=value pairs of CONFIG_GRPC_XDS_NODE_METADATA (others are skipped, as
// there).
func xdsNode(x XDSSettings) *corev3.Node {
	fields := map[string]*structpb.Value{}
	for _, entry := range strings.Split(x.NodeMetadata, ",") {
		if k, v, ok := strings.Cut(entry, "="); ok {
			fields[k] = structpb.NewStringValue(v)
		}
	}
	return &corev3.Node{Id: x.NodeID, Metadata: &structpb.Struct{Fields: fields}}
}

// run keeps a stream open until ctx ends, reconnecting after each failure
// with the XDS_CLIENT_BACKOFF_* backoff (reset once a stream delivered).
func (c *xdsClient) run(ctx context.Context) {
	attempt := 0
	for {
		delivered, err := c.stream(ctx)
		if ctx.Err() != nil {
			return
		}
		if delivered {
			attempt = 0
		}
		wait := c.backoff(attempt)
		attempt++
		c.log.Error("xDS stream to the management server ended; reconnecting", "server", c.set.ServerURL, "in", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// backoff is the wait before reconnect attempt n, as the reference's
// backoff computes it: initial × factor^n, with jitter a random duration
// between initial and that, within [initial, max].
func (c *xdsClient) backoff(n int) time.Duration {
	lo, hi := max(c.set.BackoffInitial, time.Millisecond), c.set.BackoffMax
	if lo >= hi {
		return hi
	}
	f := c.set.BackoffFactor
	if f <= 0 {
		f = 2
	}
	d := float64(lo) * math.Pow(f, float64(n))
	if c.set.BackoffJitter && d > float64(lo) {
		d = float64(lo) + rand.Float64()*(d-float64(lo))
	}
	if d > float64(hi) {
		return hi
	}
	return max(time.Duration(d), lo)
}

// stream runs one ADS stream until it fails; delivered says whether a
// response was received on it.
func (c *xdsClient) stream(ctx context.Context) (delivered bool, err error) {
	conn, err := grpc.NewClient(c.set.ServerURL, c.opts...)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	sctx, cancel := context.WithCancel(metadata.NewOutgoingContext(ctx, metadata.New(c.set.Headers)))
	defer cancel()
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(sctx)
	if err != nil {
		return false, err
	}
	if err := st.Send(&discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: rateLimitConfigType}); err != nil {
		return false, err
	}
	c.log.Info("subscribed to rate limit configurations", "server", c.set.ServerURL, "node", c.node.GetId())
	version := ""
	for {
		resp, err := st.Recv()
		if err != nil {
			return delivered, err
		}
		delivered = true
		if resp.GetTypeUrl() != rateLimitConfigType {
			continue
		}
		ack := &discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: rateLimitConfigType, ResponseNonce: resp.GetNonce()}
		files, err := xdsFiles(resp.GetResources())
		if err == nil {
			err = c.apply(files)
		}
		if err != nil {
			c.log.Error("rejected rate limit configuration from the xDS server", "version", resp.GetVersionInfo(), "err", err)
			ack.ErrorDetail = &statuspb.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
		} else {
			version = resp.GetVersionInfo()
		}
		ack.VersionInfo = version
		if err := st.Send(ack); err != nil {
			return delivered, err
		}
	}
}

// xdsFiles turns the resources of one response into rule files for the
// loader: each RateLimitConfig becomes the file the reference would have
// built from it, named by the resource's name, with its fields read
// straight from the message: written out as YAML to be parsed again, a
// 120,000-descriptor config of 2.4 MB would become 41 MB of YAML and 7 GB
// of allocations.
func xdsFiles(resources []*anypb.Any) ([]File, error) {
	files := make([]File, 0, len(resources))
	for _, res := range resources {
		conf := &rlconfv3.RateLimitConfig{}
		if err := res.UnmarshalTo(conf); err != nil {
			return nil, fmt.Errorf("resource is not a RateLimitConfig: %v", err)
		}
		files = append(files, File{Name: conf.GetName(),
			root: &yamlRoot{Domain: conf.GetDomain(), Descriptors: xdsDescriptors(conf.GetDescriptors())}})
	}
	return files, nil
}

func xdsDescriptors(pb []*rlconfv3.RateLimitDescriptor) []yamlDescriptor {
	out := make([]yamlDescriptor, len(pb))
	for i, d := range pb {
		out[i] = yamlDescriptor{Key: d.GetKey(), Value: d.GetValue(), Descriptors: xdsDescriptors(d.GetDescriptors()),
			ShadowMode: d.GetShadowMode(), DetailedMetric: d.GetDetailedMetric(), QuotaMode: d.GetQuotaMode()}
		if m := d.GetMetadata(); m != nil {
			out[i].Metadata = m.AsMap()
		}
		if p := d.GetRateLimit(); p != nil {
			l := &yamlLimit{RequestsPerUnit: p.GetRequestsPerUnit(), Unit: p.GetUnit().String(), Unlimited: p.GetUnlimited(), Name: p.GetName()}
			for _, r := range p.GetReplaces() {
				l.Replaces = append(l.Replaces, struct {
					Name string `yaml:"name"`
				}{r.GetName()})
			}
			out[i].RateLimit = l
		}
	}
	return out
}

func parseFloat(v string) (float64, error) {
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err == nil && math.IsNaN(f) {
		return 0, errors.New("NaN")
	}
	return f, err
}

// startXDS starts the xDS client when CONFIG_TYPE=GRPC_XDS_SOTW and, unless
// FORCE_START_WITHOUT_INITIAL_CONFIG, waits until a first set of rules has
// loaded (or ctx ends: the start is cancelled).
func (s *Server) startXDS(ctx context.Context) error {
	if s.set.ConfigType != configTypeXDS {
		return nil
	}
	first := make(chan struct{})
	var once sync.Once
	c, err := newXDSClient(s.set.XDS, s.log, func(files []File) error {
		if err := s.apply(files); err != nil {
			return err
		}
		once.Do(func() { close(first) })
		return nil
	})
	if err != nil {
		return err
	}
	cctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.run(cctx) }()
	var stop sync.Once
	s.stopXDS = func() { stop.Do(func() { cancel(); <-done }) }
	if s.set.ForceStart {
		return nil
	}
	s.log.Info("waiting for the first rate limit configuration from the xDS server", "server", s.set.XDS.ServerURL)
	select {
	case <-first:
		return nil
	case <-ctx.Done():
		s.stopXDS()
		return fmt.Errorf("start cancelled while waiting for the first rate limit configuration from CONFIG_GRPC_XDS_SERVER_URL=%s: %w", s.set.XDS.ServerURL, ctx.Err())
	}
}
