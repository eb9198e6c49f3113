package gubernator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	gubernatoralg "github.com/floodgate-dev/floodgate/algorithm/gubernator"
	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/gubernator/gubernatorpb"
)

// The paths gubernator's HTTP gateway serves.
const (
	PathGetRateLimits = "/v1/GetRateLimits"
	PathHealthCheck   = "/v1/HealthCheck"
	PathLiveCheck     = "/v1/LiveCheck"
)

// The JSON forms of gubernator's gateway: field names as in the proto,
// every field written (int64 as strings, enums by name), unknown input
// fields ignored.
var (
	jsonOut = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}
	jsonIn  = protojson.UnmarshalOptions{DiscardUnknown: true}
)

// Handler returns the HTTP handler of gubernator's gateway paths
// (PathGetRateLimits, PathHealthCheck, PathLiveCheck); a body over
// maxBody bytes is refused with 413. Mount it at each of the paths.
func (s *Service) Handler(maxBody int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case PathGetRateLimits:
			if r.Method != http.MethodPost {
				writeStatus(w, status.New(codes.Unimplemented, http.StatusText(http.StatusMethodNotAllowed)))
				return
			}
			s.serveGetRateLimits(w, r, maxBody)
		case PathHealthCheck, PathLiveCheck:
			if r.Method != http.MethodGet {
				writeStatus(w, status.New(codes.Unimplemented, http.StatusText(http.StatusMethodNotAllowed)))
				return
			}
			var resp proto.Message
			var err error
			if r.URL.Path == PathHealthCheck {
				resp, err = s.HealthCheck(r.Context(), &gubernatorpb.HealthCheckReq{})
			} else {
				resp, err = s.LiveCheck(r.Context(), &gubernatorpb.LiveCheckReq{})
			}
			s.writeAnswer(w, resp, err)
		default:
			writeStatus(w, status.New(codes.NotFound, http.StatusText(http.StatusNotFound)))
		}
	})
}

func (s *Service) serveGetRateLimits(w http.ResponseWriter, r *http.Request, maxBody int64) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeJSON(w, http.StatusRequestEntityTooLarge, status.Newf(codes.ResourceExhausted,
				"request body is over %d bytes (max_body_bytes)", maxBody).Proto())
			return
		}
		writeStatus(w, status.New(codes.InvalidArgument, err.Error()))
		return
	}
	var req gubernatorpb.GetRateLimitsReq
	if err := jsonIn.Unmarshal(body, &req); err != nil {
		writeStatus(w, status.New(codes.InvalidArgument, err.Error()))
		return
	}
	resp, err := s.GetRateLimits(r.Context(), &req)
	s.writeAnswer(w, resp, err)
}

// writeAnswer writes a method's answer, or its error as the gateway does.
// As v2.13.0 it leaves out the fields v2.13.0's gateway does not know.
func (s *Service) writeAnswer(w http.ResponseWriter, resp proto.Message, err error) {
	if err != nil {
		st, ok := status.FromError(err)
		if !ok || errors.Is(err, context.Canceled) {
			st = status.New(codes.Unknown, err.Error())
		}
		writeStatus(w, st)
		return
	}
	if s.o.Version == gubernatoralg.V213 {
		writeV213(w, resp)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// writeV213 writes resp without the fields gubernator v2.13.0 does not
// have: the responses' retry_after, the health answer's local_peers and
// region_peers.
func writeV213(w http.ResponseWriter, resp proto.Message) {
	b, err := jsonOut.Marshal(resp)
	var m map[string]any
	if err == nil {
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		err = d.Decode(&m)
	}
	if err == nil {
		delete(m, "local_peers")
		delete(m, "region_peers")
		if rs, ok := m["responses"].([]any); ok {
			for _, r := range rs {
				if r, ok := r.(map[string]any); ok {
					delete(r, "retry_after")
				}
			}
		}
		b, err = json.Marshal(m)
	}
	if err != nil { // cannot happen for these messages
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(b)
}

// writeStatus writes a gRPC status as grpc-gateway does: its code's HTTP
// status and {"code", "message", "details"}.
func writeStatus(w http.ResponseWriter, st *status.Status) {
	p := st.Proto()
	p.Message = strings.ToValidUTF8(p.Message, "\uFFFD") // a decoder's error may quote bad bytes
	writeJSON(w, httpStatus(st.Code()), p)
}

func writeJSON(w http.ResponseWriter, code int, m proto.Message) {
	b, err := jsonOut.Marshal(m)
	if err != nil { // cannot happen for these messages
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(b)
}

// httpStatus maps a gRPC code to the HTTP status grpc-gateway answers it with.
func httpStatus(c codes.Code) int {
	switch c {
	case codes.OK:
		return http.StatusOK
	case codes.Canceled:
		return 499
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.NotFound:
		return http.StatusNotFound
	case codes.AlreadyExists, codes.Aborted:
		return http.StatusConflict
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unimplemented:
		return http.StatusNotImplemented
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
