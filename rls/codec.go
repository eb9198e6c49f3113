package rls

import (
	"fmt"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// ServerOption returns the gRPC server option that lets the service decide
// on descriptor values that are not valid UTF-8. Pass it to grpc.NewServer
// of any server the Service is registered on.
//
// Envoy builds descriptor values from request bytes (headers, paths), which
// need not be UTF-8, but protobuf-go refuses invalid UTF-8 in the proto3
// string fields of RateLimitRequest, so without this option such a call
// fails before the service sees it and Envoy, usually configured to fail
// open, lets the request through unlimited. With it, a request that the
// standard decoder refuses is decoded again by hand, its strings taken as
// the exact bytes sent, and decided like any other: values that differ in
// any byte are different counters. Valid requests take the standard path
// unchanged. Every other message is encoded and decoded as usual.
func ServerOption() grpc.ServerOption {
	return grpc.ForceServerCodecV2(bytesCodec{std: encoding.GetCodecV2("proto")})
}

// bytesCodec is the standard proto codec with a fallback decoder for
// RateLimitRequest.
type bytesCodec struct{ std encoding.CodecV2 }

func (c bytesCodec) Marshal(v any) (mem.BufferSlice, error) { return c.std.Marshal(v) }

func (c bytesCodec) Name() string { return c.std.Name() }

func (c bytesCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.std.Unmarshal(data, v)
	req, ok := v.(*rlsv3.RateLimitRequest)
	if err == nil || !ok {
		return err
	}
	b := data.Materialize()
	proto.Reset(req)
	if derr := decodeRequest(b, req); derr != nil {
		return fmt.Errorf("%w (decoding its strings as bytes: %v)", err, derr)
	}
	return nil
}

// decodeRequest decodes a RateLimitRequest from b, taking its string
// fields (domain, entry keys and values) as raw bytes. Fields without
// strings (hits_addend, limit overrides, fields added later) are gathered
// and left to the standard decoder.
func decodeRequest(b []byte, req *rlsv3.RateLimitRequest) error {
	var rest []byte
	for len(b) > 0 {
		num, typ, field, val, err := nextField(&b)
		if err != nil {
			return err
		}
		switch {
		case num == 1 && typ == protowire.BytesType: // domain
			s, _ := protowire.ConsumeBytes(val)
			req.Domain = string(s)
		case num == 2 && typ == protowire.BytesType: // descriptors
			s, _ := protowire.ConsumeBytes(val)
			d := &commonv3.RateLimitDescriptor{}
			if err := decodeDescriptor(s, d); err != nil {
				return fmt.Errorf("descriptor %d: %w", len(req.Descriptors), err)
			}
			req.Descriptors = append(req.Descriptors, d)
		default:
			rest = append(rest, field...)
		}
	}
	return mergeRest(rest, req)
}

// decodeDescriptor decodes a RateLimitDescriptor the same way.
func decodeDescriptor(b []byte, d *commonv3.RateLimitDescriptor) error {
	var rest []byte
	for len(b) > 0 {
		num, typ, field, val, err := nextField(&b)
		if err != nil {
			return err
		}
		if num != 1 || typ != protowire.BytesType { // not entries
			rest = append(rest, field...)
			continue
		}
		s, _ := protowire.ConsumeBytes(val)
		e := &commonv3.RateLimitDescriptor_Entry{}
		if err := decodeEntry(s, e); err != nil {
			return fmt.Errorf("entry %d: %w", len(d.Entries), err)
		}
		d.Entries = append(d.Entries, e)
	}
	return mergeRest(rest, d)
}

// decodeEntry decodes a descriptor entry's key and value as bytes.
func decodeEntry(b []byte, e *commonv3.RateLimitDescriptor_Entry) error {
	var rest []byte
	for len(b) > 0 {
		num, typ, field, val, err := nextField(&b)
		if err != nil {
			return err
		}
		switch {
		case num == 1 && typ == protowire.BytesType:
			s, _ := protowire.ConsumeBytes(val)
			e.Key = string(s)
		case num == 2 && typ == protowire.BytesType:
			s, _ := protowire.ConsumeBytes(val)
			e.Value = string(s)
		default:
			rest = append(rest, field...)
		}
	}
	return mergeRest(rest, e)
}

// nextField takes the next field off *b: its number, wire type, the whole
// field (tag included) and its value.
func nextField(b *[]byte) (num protowire.Number, typ protowire.Type, field, val []byte, err error) {
	num, typ, n := protowire.ConsumeTag(*b)
	if n < 0 {
		return 0, 0, nil, nil, protowire.ParseError(n)
	}
	m := protowire.ConsumeFieldValue(num, typ, (*b)[n:])
	if m < 0 {
		return 0, 0, nil, nil, protowire.ParseError(m)
	}
	field, val = (*b)[:n+m], (*b)[n:n+m]
	*b = (*b)[n+m:]
	return num, typ, field, val, nil
}

// mergeRest decodes the fields without strings with the standard decoder.
func mergeRest(rest []byte, m proto.Message) error {
	if len(rest) == 0 {
		return nil
	}
	return proto.UnmarshalOptions{Merge: true}.Unmarshal(rest, m)
}
