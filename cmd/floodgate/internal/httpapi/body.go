package httpapi

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"unicode/utf8"
)

// JSONOnly is the media-type check of every JSON endpoint:
// application/json, with or without parameters such as charset=utf-8.
// Browsers send a cross-origin POST without a preflight only for the
// "simple" types (text/plain, form encodings), so requiring JSON keeps a
// web page from spending or releasing a visitor's quota through the
// visitor's browser.
func JSONOnly(mediaType string) bool { return mediaType == "application/json" }

// errUnsupportedType is the message of a 415 answer.
const errUnsupportedType = `Content-Type must be application/json (send the header "Content-Type: application/json")`

// bodyError is a request body a JSON endpoint refuses: the status code to
// answer and why.
type bodyError struct {
	code int
	msg  string
}

// readJSONBody reads the body of a request to a JSON endpoint with the
// checks every one of them makes: a Content-Type that accept takes
// (JSONOnly unless the endpoint says otherwise; 415), at most limit bytes
// (413), and valid UTF-8 with no lone surrogate escaped (400).
func readJSONBody(w http.ResponseWriter, r *http.Request, limit int64, accept func(mediaType string) bool) ([]byte, *bodyError) {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		mt = "" // absent or malformed: the empty media type, which JSONOnly refuses
	}
	if !accept(mt) {
		return nil, &bodyError{http.StatusUnsupportedMediaType, errUnsupportedType}
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &bodyError{http.StatusRequestEntityTooLarge, fmt.Sprintf("request body is larger than %d bytes", mbe.Limit)}
		}
		return nil, &bodyError{http.StatusBadRequest, "reading the request body: " + err.Error()}
	}
	if err := checkText(data); err != nil {
		return nil, &bodyError{http.StatusBadRequest, err.Error()}
	}
	return data, nil
}

// checkText reports an error if body is not valid UTF-8 or escapes a lone
// UTF-16 surrogate (\ud800 without its pair). encoding/json would turn
// either into U+FFFD, so "J\xff" and "J\xfe" would silently become one
// counter; refusing them keeps different bytes from sharing a key.
func checkText(body []byte) error {
	if !utf8.Valid(body) {
		i := invalidAt(body)
		return fmt.Errorf("request body is not valid UTF-8 (byte %d is 0x%02x): JSON text must be UTF-8; "+
			"send values that are not text in an encoding such as base64", i, body[i])
	}
	if i := loneSurrogate(body); i >= 0 {
		return fmt.Errorf("request body escapes a lone UTF-16 surrogate at byte %d: "+
			"\\ud800-\\udfff must come in high-low pairs", i)
	}
	return nil
}

// invalidAt returns the offset of the first byte that is not part of valid
// UTF-8 in b.
func invalidAt(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return 0
}

// loneSurrogate returns the offset of the first \u escape inside a JSON
// string that names a surrogate not part of a high-low pair, or -1.
func loneSurrogate(b []byte) int {
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !inString {
			inString = c == '"'
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			if i+1 < len(b) && b[i+1] == 'u' {
				u, ok := hex4(b, i+2)
				switch {
				case !ok:
				case u >= 0xd800 && u < 0xdc00:
					lo, ok := uint32(0), false
					if i+7 < len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
						lo, ok = hex4(b, i+8)
					}
					if !ok || lo < 0xdc00 || lo > 0xdfff {
						return i
					}
					i += 6 // the pair's low half is skipped below
				case u >= 0xdc00 && u <= 0xdfff:
					return i
				}
			}
			i++ // skip the escaped character
		}
	}
	return -1
}

// hex4 decodes the four hex digits at b[i:i+4].
func hex4(b []byte, i int) (uint32, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var u uint32
	for _, c := range b[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		u = u<<4 | uint32(c)
	}
	return u, true
}
