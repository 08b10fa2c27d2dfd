package bearer_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/adk2goose/goose-operator/internal/bearer"
)

func TestTransportAddsTokenWithoutChangingTheRequest(t *testing.T) {
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		got = r.Header.Get("Authorization")
	}))
	defer srv.Close()
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: bearer.Transport{Token: "t0k"}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got != "Bearer t0k" {
		t.Errorf("server saw Authorization %q, want %q", got, "Bearer t0k")
	}
	if h := req.Header.Get("Authorization"); h != "" {
		t.Errorf("the caller's request was changed: Authorization %q", h)
	}
}
