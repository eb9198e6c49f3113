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
		t.Run(ct, func(t *testing.T) {
			code, m := postAs(t, srv.URL, ct, body)
			if code != http.StatusUnsupportedMediaType || !strings.Contains(m["error"].(string), "application/json") {
				t.Errorf("Content-Type %q: %d %v, want 415 naming application/json", ct, code, m)
			}
		})
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
		t.Run(v, func(t *testing.T) {
			body := `{"descriptors":[{"entries":[{"key":"client","value":"` + v + `"}]}]}`
			code, m := postAs(t, srv.URL, "application/json", body)
			msg, _ := m["error"].(string)
			if code != http.StatusBadRequest || !(strings.Contains(msg, "UTF-8") || strings.Contains(msg, "surrogate")) {
				t.Errorf("value %q: %d %v, want 400 about UTF-8", v, code, m)
			}
		})
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

// postText sends body to url with the given Content-Type and returns the status
// code and the answer's text.
func postText(t *testing.T, url, contentType, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
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
	return resp.StatusCode, string(data)
}

// TestEveryJSONEndpointChecksItsBody: /v1/charge, /v1/release, /v1/usage and /json
// refuse what /v1/check refuses. A "simple" cross-origin POST (text/plain,
// form encodings) from a web page gets 415 and changes no counter, and a
// value that is not UTF-8 gets 400 instead of being merged into U+FFFD.
func TestEveryJSONEndpointChecksItsBody(t *testing.T) {
	url := settleServer(t)
	envoy := envoyServer(t).URL + "/json"
	tenant := func(v string) string {
		return `{"hits":999,"descriptors":[{"entries":[{"key":"tenant","value":"` + v + `"}]}]}`
	}
	stream := `{"descriptors":[{"entries":[{"key":"stream","value":"s"}]}]}`
	envoyBody := `{"domain":"edge","descriptors":[{"entries":[{"key":"client","value":"ct"}]}]}`
	for _, ct := range []string{"", "text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
		"multipart/form-data; boundary=x"} {
		for _, c := range []struct{ url, body string }{
			{url + "/v1/check", tenant("web")}, {url + "/v1/charge", tenant("web")},
			{url + "/v1/release", stream}, {url + "/v1/usage", tenant("web")}, {envoy, envoyBody},
		} {
			t.Run(c.url[strings.LastIndex(c.url, "/"):]+" "+ct, func(t *testing.T) {
				code, got := postText(t, c.url, ct, c.body)
				if code != http.StatusUnsupportedMediaType || !strings.Contains(got, "application/json") {
					t.Errorf("Content-Type %q: %d %s, want 415 naming application/json", ct, code, got)
				}
			})
		}
	}
	t.Run("the refused charges counted nothing", func(t *testing.T) {
		code, got := postText(t, url+"/v1/check", "application/json", `{"peek":true,"descriptors":[{"entries":[{"key":"tenant","value":"web"}]}]}`)
		if code != http.StatusOK || !strings.Contains(got, `"remaining":1000`) {
			t.Errorf("peek after refused charges: %d %s, want 1000 remaining", code, got)
		}
	})
	t.Run("the refused /json checks counted nothing", func(t *testing.T) {
		// The edge rule allows 2 per client: both still pass.
		for i := range 2 {
			if code, got := postText(t, envoy, "application/json", envoyBody); code != http.StatusOK {
				t.Errorf("JSON check %d: %d %s, want 200", i, code, got)
			}
		}
	})
	for _, v := range []string{"Z\xff", "\xc0\xaf", `Z\ud800`} {
		for _, path := range []string{"/v1/check", "/v1/charge"} {
			t.Run(path+" "+v, func(t *testing.T) {
				code, got := postText(t, url+path, "application/json", tenant(v))
				if code != http.StatusBadRequest || !(strings.Contains(got, "UTF-8") || strings.Contains(got, "surrogate")) {
					t.Errorf("value %q: %d %s, want 400 about UTF-8", v, code, got)
				}
			})
		}
	}
	t.Run("/v1/release", func(t *testing.T) {
		code, got := postText(t, url+"/v1/release", "application/json", "{\"descriptors\":[{\"entries\":[{\"key\":\"stream\",\"value\":\"s\xff\"}]}]}")
		if code != http.StatusBadRequest || !strings.Contains(got, "UTF-8") {
			t.Errorf("release of a value that is not UTF-8: %d %s, want 400 about UTF-8", code, got)
		}
	})
	t.Run("/json", func(t *testing.T) {
		code, got := postText(t, envoy, "application/json", "{\"domain\":\"edge\",\"descriptors\":[{\"entries\":[{\"key\":\"client\",\"value\":\"Z\xff\"}]}]}")
		if code != http.StatusBadRequest || !strings.Contains(got, "UTF-8") {
			t.Errorf("/json value that is not UTF-8: %d %s, want 400 about UTF-8", code, got)
		}
	})
	t.Run("Z\\uFFFD has its own counter", func(t *testing.T) {
		code, got := postText(t, url+"/v1/check", "application/json", `{"peek":true,"descriptors":[{"entries":[{"key":"tenant","value":"Z\uFFFD"}]}]}`)
		if code != http.StatusOK || !strings.Contains(got, `"remaining":1000`) {
			t.Errorf("peek at Z\\uFFFD after a refused charge of Z\\xff: %d %s, want 1000 remaining", code, got)
		}
	})
}
