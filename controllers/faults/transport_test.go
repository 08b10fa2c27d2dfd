package faults_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/adk2goose/goose-operator/controllers/faults"
)

// alwaysFailing faults every request it may fault with kind.
func alwaysFailing(kind faults.Kind) *faults.Injector {
	in := faults.NewInjector(1)
	in.Writes, in.Reads = faults.Rates{kind: 1000}, faults.Rates{kind: 1000}
	return in
}

// TestDiscoveryIsNotFaulted: discovery and watches pass untouched even when
// every other request fails. A manager that fails discovery gives up in
// SetupWithManager (a real one exits and is restarted), which would end the
// run instead of testing the reconcilers.
func TestDiscoveryIsNotFaulted(t *testing.T) {
	var reached atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		_, _ = io.WriteString(w, "{}")
	}))
	defer srv.Close()
	c := &http.Client{Transport: alwaysFailing(faults.Internal).Wrap(http.DefaultTransport)}
	for _, tc := range []struct {
		method, path string
		faulted      bool
	}{
		{"GET", "/api", false},
		{"GET", "/apis", false},
		{"GET", "/api/v1", false},
		{"GET", "/apis/agents.adk2goose.dev/v1alpha1", false},
		{"GET", "/version", false},
		{"GET", "/openapi/v3", false},
		{"GET", "/api/v1/namespaces/a/pods?watch=true", false},
		{"GET", "/apis/agents.adk2goose.dev/v1alpha1/gooseagents?watch=1", false},
		{"GET", "/api/v1/namespaces/a/pods", true},
		{"GET", "/apis/apps/v1/namespaces/a/statefulsets/x", true},
		{"PATCH", "/apis/agents.adk2goose.dev/v1alpha1/namespaces/a/gooseagents/x/status", true},
		{"DELETE", "/api/v1/namespaces/a/configmaps/x", true},
	} {
		req, err := http.NewRequestWithContext(t.Context(), tc.method, srv.URL+tc.path, strings.NewReader(""))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.path, err)
		}
		_ = resp.Body.Close()
		if got := resp.StatusCode == http.StatusInternalServerError; got != tc.faulted {
			t.Errorf("%s %s: status %d, faulted %v, want faulted %v", tc.method, tc.path, resp.StatusCode, got, tc.faulted)
		}
	}
}

// TestInjectedFaults: each kind reaches the client as the apiserver would
// send it, and a lost response was still done by the server.
func TestInjectedFaults(t *testing.T) {
	var reached atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		_, _ = io.WriteString(w, "{}")
	}))
	defer srv.Close()
	for _, tc := range []struct {
		kind       faults.Kind
		status     int
		retryAfter string
		reaches    bool
	}{
		{faults.Conflict, http.StatusConflict, "", false},
		{faults.TooMany, http.StatusTooManyRequests, "1", false},
		{faults.Unavailable, http.StatusServiceUnavailable, "1", false},
		{faults.Internal, http.StatusInternalServerError, "", false},
		{faults.LostResponse, 0, "", true},
		{faults.Delay, http.StatusOK, "", true},
	} {
		in := alwaysFailing(tc.kind)
		c := &http.Client{Transport: in.Wrap(http.DefaultTransport)}
		before := reached.Load()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPatch, srv.URL+"/api/v1/namespaces/a/configmaps/x", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		switch {
		case tc.kind == faults.LostResponse:
			if !errors.Is(err, faults.ErrLostResponse) {
				t.Errorf("%s: err %v, want ErrLostResponse", tc.kind, err)
			}
		case err != nil:
			t.Fatalf("%s: %v", tc.kind, err)
		default:
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != tc.status || resp.Header.Get("Retry-After") != tc.retryAfter {
				t.Errorf("%s: status %d Retry-After %q, want %d %q", tc.kind, resp.StatusCode, resp.Header.Get("Retry-After"), tc.status, tc.retryAfter)
			}
			if tc.status != http.StatusOK && !strings.Contains(string(body), `"kind":"Status"`) {
				t.Errorf("%s: body %s, want a Status", tc.kind, body)
			}
		}
		if got := reached.Load() > before; got != tc.reaches {
			t.Errorf("%s: reached the server %v, want %v", tc.kind, got, tc.reaches)
		}
		if in.Counts()[tc.kind] != 1 {
			t.Errorf("%s: counts %v, want one", tc.kind, in.Counts())
		}
	}
}
