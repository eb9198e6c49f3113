package httprules_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/floodgate-dev/floodgate/httplimit"
	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/rules"
	"github.com/floodgate-dev/floodgate/rules/httprules"
)

func ExampleMiddleware() {
	set, err := rules.Parse("api.yaml", []byte(`
domain: api
rules:
  - name: per-key
    match: {header:x-api-key: "*"}
    count_by: [header:x-api-key]
    limit: 2
    window: 1m
    algorithm: fixed-window
`))
	if err != nil {
		panic(err)
	}
	limit, err := httprules.Middleware(httprules.Options{
		Checker: rules.NewEngine(set, memstore.New(memstore.Options{})),
		Sources: []httprules.Source{httprules.Header("X-API-Key")},
	})
	if err != nil {
		panic(err)
	}
	h := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	}))
	for i := 0; i < 3; i++ {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("X-API-Key", "k1")
		h.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Header().Get("RateLimit-Policy"), rec.Header().Get("X-RateLimit-Remaining"))
	}
	// Output:
	// 200 "per-key";q=2;w=60 1
	// 200 "per-key";q=2;w=60 0
	// 429 "per-key";q=2;w=60 0
}

func ExampleTransport() {
	dependency := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "ok")
	}))
	defer dependency.Close()
	set, err := rules.Parse("outbound.yaml", []byte(`
domain: outbound
rules:
  - name: dependency
    match: {host: "*"}
    count_by: [host]
    limit: 1
    window: 1h
    algorithm: fixed-window
`))
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: &httprules.Transport{
		Checker: rules.NewEngine(set, memstore.New(memstore.Options{})),
	}}
	for i := 0; i < 2; i++ {
		resp, err := client.Get(dependency.URL)
		if err != nil {
			var le *httplimit.LimitError
			fmt.Println("not sent:", errors.As(err, &le) && le.Rule == "dependency")
			continue
		}
		resp.Body.Close()
		fmt.Println("sent:", resp.StatusCode)
	}
	// Output:
	// sent: 200
	// not sent: true
}
