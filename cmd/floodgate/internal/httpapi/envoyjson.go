package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// RateLimitService decides Envoy RLS requests; *rls.Service implements it.
type RateLimitService interface {
	ShouldRateLimit(ctx context.Context, in *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error)
}

// EnvoyJSONOptions configures NewEnvoyJSON.
type EnvoyJSONOptions struct {
	// Service decides; required.
	Service RateLimitService
	// MaxBodyBytes bounds a request body; 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Logger receives errors; nil means slog.Default().
	Logger *slog.Logger
	// AcceptType reports whether a request's media type (from its
	// Content-Type, without parameters) is accepted; others get 415. Nil
	// means JSONOnly, as on every JSON endpoint. A request without a
	// Content-Type, or with one that does not parse, has the media type "".
	AcceptType func(mediaType string) bool
	// FailureStatus is the status of a request the service fails to
	// decide (any error but INVALID_ARGUMENT); 0 means 503.
	// envoyproxy/ratelimit answers 400.
	FailureStatus int
}

// NewEnvoyJSON returns the handler of POST /json, the JSON endpoint of
// envoyproxy/ratelimit, so that its HTTP clients switch to Floodgate by
// changing the address. The body is an Envoy RateLimitRequest in the
// protobuf JSON mapping:
//
//	{"domain": "edge", "descriptors": [{"entries": [{"key": "client", "value": "acme"}]}], "hitsAddend": 1}
//
// (field names in lowerCamelCase or as in the .proto, hits_addend). The
// answer is the RateLimitResponse in the same mapping, as envoyproxy/ratelimit
// writes it ({"overallCode": "OK", "statuses": [...]}, zero fields left out),
// with status 200 for OK, 429 for OVER_LIMIT and 500 for UNKNOWN. A body
// that is not such a request, or that the RLS front end refuses
// (INVALID_ARGUMENT), is 400 with the text "Bad Request", as there; a body
// over the limit is 413; a failure to decide is 503 ("Service
// Unavailable"), where envoyproxy/ratelimit says 400.
func NewEnvoyJSON(o EnvoyJSONOptions) (http.Handler, error) {
	if o.Service == nil {
		return nil, errors.New("httpapi: EnvoyJSONOptions.Service is nil")
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.AcceptType == nil {
		o.AcceptType = JSONOnly
	}
	if o.FailureStatus == 0 {
		o.FailureStatus = http.StatusServiceUnavailable
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { serveEnvoyJSON(o, w, r) }), nil
}

func serveEnvoyJSON(o EnvoyJSONOptions, w http.ResponseWriter, r *http.Request) {
	body, berr := readJSONBody(w, r, o.MaxBodyBytes, o.AcceptType)
	switch {
	case berr == nil:
	case berr.code == http.StatusUnsupportedMediaType:
		http.Error(w, berr.msg, berr.code)
		return
	case berr.code == http.StatusBadRequest:
		http.Error(w, "Bad Request: "+berr.msg, berr.code)
		return
	default:
		textStatus(w, berr.code)
		return
	}
	var req rlsv3.RateLimitRequest
	if err := protojson.Unmarshal(body, &req); err != nil {
		o.Logger.Debug("/json: malformed request", "err", err)
		textStatus(w, http.StatusBadRequest)
		return
	}
	resp, err := o.Service.ShouldRateLimit(r.Context(), &req)
	if err != nil {
		if status.Code(err) == codes.InvalidArgument {
			o.Logger.Debug("/json: invalid request", "err", err)
			textStatus(w, http.StatusBadRequest)
			return
		}
		o.Logger.Warn("/json: check failed", "err", err)
		textStatus(w, o.FailureStatus)
		return
	}
	out, err := protojson.Marshal(resp)
	if err != nil {
		o.Logger.Error("/json: encoding the answer", "err", err)
		textStatus(w, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	switch resp.GetOverallCode() {
	case rlsv3.RateLimitResponse_OVER_LIMIT:
		w.WriteHeader(http.StatusTooManyRequests)
	case rlsv3.RateLimitResponse_OK:
	default:
		w.WriteHeader(http.StatusInternalServerError)
	}
	w.Write(out)
}

// textStatus answers with the status code and its text, as http.Error does.
func textStatus(w http.ResponseWriter, code int) {
	http.Error(w, http.StatusText(code), code)
}
