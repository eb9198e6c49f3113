package httpapi

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// postAs sends body to /v1/check with the given Content-Type over a real
// connection and returns the status code and the decoded answer.
func postAs(t *testing.T, url, contentType, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/v1/check", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("answer %q is not JSON: %v", data, err)
	}
	return resp.StatusCode, m
}

// TestCheckContentType: only a body declared as JSON is decided, so a web
// page cannot make a browser spend someone's quota with a "simple"
// cross-origin POST (text/plain, form encodings), which needs no preflight.
func TestCheckContentType(t *testing.T) {
	srv := server(t)
	body := `{"descriptors":[{"entries":[{"key":"client","value":"ct"}]}]}`
	for _, ct := range []string{"", "text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
		"multipart/form-data; boundary=x", "application/jsonx", "application/json;;"} {
		code, m := postAs(t, srv.URL, ct, body)
		if code != http.StatusUnsupportedMediaType || !strings.Contains(m["error"].(string), "application/json") {
			t.Errorf("Content-Type %q: %d %v, want 415 naming application/json", ct, code, m)
		}
	}
	// The 415s counted nothing: the client's two requests are still there.
	for _, ct := range []string{"application/json", "Application/JSON; charset=utf-8"} {
		if code, m := postAs(t, srv.URL, ct, body); code != http.StatusOK || m["allowed"] != true {
			t.Errorf("Content-Type %q: %d %v, want 200 allowed", ct, code, m)
		}
	}
}

// TestCheckInvalidUTF8: bytes that are not UTF-8 get 400 instead of being
// merged into U+FFFD, so J\xff and J\xfe cannot share a counter; valid text
// (escaped surrogate pairs included) is decided as before.
func TestCheckInvalidUTF8(t *testing.T) {
	srv := server(t)
	for _, v := range []string{"J\xff", "J\xfe", "\xc0\xaf", "\xed\xa0\x80", `J\ud800`, `\udc00J`, `\ud800\u0041`} {
		body := `{"descriptors":[{"entries":[{"key":"client","value":"` + v + `"}]}]}`
		code, m := postAs(t, srv.URL, "application/json", body)
		msg, _ := m["error"].(string)
		if code != http.StatusBadRequest || !(strings.Contains(msg, "UTF-8") || strings.Contains(msg, "surrogate")) {
			t.Errorf("value %q: %d %v, want 400 about UTF-8", v, code, m)
		}
	}
	// Two distinct valid values, one escaped as a surrogate pair and one
	// written raw: each has its own counter (the limit is 2 per client).
	for _, v := range []string{`\ud83d\ude00`, "\U0001F600", `\\ud800`} {
		body := `{"descriptors":[{"entries":[{"key":"client","value":"` + v + `"}]}]}`
		if code, m := postAs(t, srv.URL, "application/json", body); code != http.StatusOK || m["allowed"] != true {
			t.Errorf("value %s: %d %v, want 200 allowed", v, code, m)
		}
	}
	// \ud83d\ude00 and the raw U+1F600 are the same text: one counter, which
	// now holds 2, so a third is over.
	body := `{"descriptors":[{"entries":[{"key":"client","value":"\ud83d\ude00"}]}]}`
	if code, m := postAs(t, srv.URL, "application/json", body); code != http.StatusOK || m["allowed"] != false {
		t.Errorf("third request for one value: %d %v, want 200 over the limit", code, m)
	}
}
