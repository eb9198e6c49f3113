package grpcguard

import "encoding/binary"

// clientPreface starts every HTTP/2 client connection.
const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// HTTP/2 frame types, flags and error codes the watch uses.
const (
	frameData      = 0x0
	frameHeaders   = 0x1
	frameRSTStream = 0x3
	frameGoAway    = 0x7

	flagEndStream = 0x1

	errCodeNo              = 0x0
	errCodeCancel          = 0x8
	errCodeEnhanceYourCalm = 0xb
)

// frame is what the scanner reports of one frame: its header, and for
// RST_STREAM its error code.
type frame struct {
	typ, flags byte
	stream     uint32
	code       uint32 // RST_STREAM's error code (0 for other frames)
}

// frameScanner follows an HTTP/2 byte stream frame by frame, looking only at
// the 9-byte frame headers and at the 4-byte error code of RST_STREAM.
type frameScanner struct {
	preface int // bytes of the client preface still to pass
	hdr     [9]byte
	hdrN    int // bytes of hdr filled
	payload int // bytes of the current frame's payload still to pass
	// A RST_STREAM frame whose error code is still to come.
	pending bool
	f       frame
	codeN   int
}

// scan passes b and calls fn for each frame completed in it (for
// RST_STREAM, once its error code is in). It stops early, returning false,
// when fn does.
func (s *frameScanner) scan(b []byte, fn func(frame) bool) bool {
	for len(b) > 0 {
		switch {
		case s.preface > 0:
			n := min(s.preface, len(b))
			s.preface -= n
			b = b[n:]
		case s.pending:
			n := min(4-s.codeN, len(b))
			for _, c := range b[:n] {
				s.f.code = s.f.code<<8 | uint32(c)
			}
			s.codeN += n
			s.payload -= n
			b = b[n:]
			if s.codeN == 4 {
				s.pending = false
				if !fn(s.f) {
					return false
				}
			}
		case s.payload > 0:
			n := min(s.payload, len(b))
			s.payload -= n
			b = b[n:]
		default:
			n := copy(s.hdr[s.hdrN:], b)
			s.hdrN += n
			b = b[n:]
			if s.hdrN < len(s.hdr) {
				return true
			}
			s.hdrN = 0
			s.payload = int(s.hdr[0])<<16 | int(s.hdr[1])<<8 | int(s.hdr[2])
			s.f = frame{typ: s.hdr[3], flags: s.hdr[4], stream: binary.BigEndian.Uint32(s.hdr[5:]) & (1<<31 - 1)}
			if s.f.typ == frameRSTStream && s.payload >= 4 {
				s.pending, s.codeN = true, 0
				continue
			}
			if !fn(s.f) {
				return false
			}
		}
	}
	return true
}

// atBoundary reports whether the stream so far ends between two frames.
func (s *frameScanner) atBoundary() bool {
	return s.preface == 0 && s.hdrN == 0 && s.payload == 0 && !s.pending
}
