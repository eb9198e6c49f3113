package server

import (
	"context"
	"io"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
)

// reflect asks the gRPC listener at addr, through the reflection service,
// for its services and for the file that defines symbol.
func reflect(t *testing.T, addr, symbol string) (services []string, file *descriptorpb.FileDescriptorProto, err error) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		return nil, nil, err
	}
	// A stream the server has already ended (UNIMPLEMENTED, without
	// reflection) fails Send with io.EOF; Recv gives its status.
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err == io.EOF {
		_, err = stream.Recv()
		return nil, nil, err
	} else if err != nil {
		return nil, nil, err
	}
	resp, err := stream.Recv()
	if err != nil {
		return nil, nil, err
	}
	for _, s := range resp.GetListServicesResponse().GetService() {
		services = append(services, s.GetName())
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: symbol}}); err != nil {
		return nil, nil, err
	}
	if resp, err = stream.Recv(); err != nil {
		return nil, nil, err
	}
	for _, b := range resp.GetFileDescriptorResponse().GetFileDescriptorProto() {
		f := &descriptorpb.FileDescriptorProto{}
		if err := proto.Unmarshal(b, f); err != nil {
			t.Fatal(err)
		}
		for _, s := range f.GetService() {
			if f.GetPackage()+"."+s.GetName() == symbol {
				file = f
			}
		}
	}
	return services, file, nil
}

// TestGRPCReflection: with grpc.reflection a reflection client lists the
// listener's services and gets the file describing the RLS service, with
// ShouldRateLimit in it; without it (the default) the reflection service is
// UNIMPLEMENTED; gubernator's service is described as well; and
// http.reflection is refused.
func TestGRPCReflection(t *testing.T) {
	const rlsService = "envoy.service.ratelimit.v3.RateLimitService"
	r := start(t, testConfig())
	if _, _, err := reflect(t, r.srv.Addr(ListenerGRPC), rlsService); status.Code(err) != codes.Unimplemented {
		t.Fatalf("reflection by default: %v, want UNIMPLEMENTED", err)
	}

	cfg := testConfig()
	cfg.GRPC.Reflection = true
	r = start(t, cfg)
	services, file, err := reflect(t, r.srv.Addr(ListenerGRPC), rlsService)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{rlsService, "grpc.health.v1.Health", "pb.gubernator.V1", "grpc.reflection.v1.ServerReflection"} {
		if !slices.Contains(services, want) {
			t.Errorf("services %v lack %s", services, want)
		}
	}
	if file == nil {
		t.Fatalf("no file describing %s", rlsService)
	}
	var methods []string
	for _, s := range file.GetService() {
		for _, m := range s.GetMethod() {
			methods = append(methods, m.GetName())
		}
	}
	if !slices.Contains(methods, "ShouldRateLimit") {
		t.Errorf("the RLS file's methods %v lack ShouldRateLimit", methods)
	}

	// gubernator's service is described too, so grpcurl can call it.
	if _, file, err = reflect(t, r.srv.Addr(ListenerGRPC), "pb.gubernator.V1"); err != nil || file == nil {
		t.Fatalf("no file describing pb.gubernator.V1: %v", err)
	}
	methods = methods[:0]
	for _, s := range file.GetService() {
		for _, m := range s.GetMethod() {
			methods = append(methods, m.GetName())
		}
	}
	for _, m := range []string{"GetRateLimits", "HealthCheck"} {
		if !slices.Contains(methods, m) {
			t.Errorf("gubernator's file's methods %v lack %s", methods, m)
		}
	}

	if _, err := ParseConfig("f.yaml", []byte("http:\n  reflection: true\n")); err == nil {
		t.Error("http.reflection accepted")
	}
}
