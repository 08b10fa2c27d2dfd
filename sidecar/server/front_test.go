package server_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/identity"
	"github.com/adk2goose/goose-operator/sidecar/server"
)

// TestCardHandlerServesTheSidecarsCard: a card made from the agent's name,
// description and auth alone (what the operator's activator has) is the
// running sidecar's card, byte for byte, in token and identity modes.
func TestCardHandlerServesTheSidecarsCard(t *testing.T) {
	for _, tc := range []struct {
		name        string
		description string
		verifier    identity.Verifier
	}{
		{"token, default description", "", nil},
		{"identity, own description", "reviews pull requests", testCallers},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := startSidecar(t, flavours[0].start(t, goosetest.Echo), t.TempDir(), func(c *server.Config) {
				c.Description, c.Identity, c.Version = tc.description, tc.verifier, "1.2.3"
			})
			code, want := sc.doWith(http.MethodGet, "/.well-known/agent-card.json", nil, nil)
			if code != http.StatusOK {
				t.Fatalf("sidecar card: %d %s", code, want)
			}
			h, err := server.CardHandler(server.CardConfig{
				AppName: appName, Description: tc.description, Version: "1.2.3", PublicBaseURL: sc.URL, Identity: tc.verifier,
			})
			if err != nil {
				t.Fatal(err)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/.well-known/agent-card.json", nil))
			if rec.Code != http.StatusOK || !bytes.Equal(rec.Body.Bytes(), want) {
				t.Fatalf("card handler: %d\n%s\nwant the sidecar's\n%s", rec.Code, rec.Body.Bytes(), want)
			}
		})
	}
}

// TestDoorAuthenticatesAndCapsLikeTheSidecar: Door refuses what the
// sidecar refuses before its handlers (no or a wrong token, a body over
// the cap), lets the open routes and preflights through without
// credentials, and hands the rest on with the body read whole.
func TestDoorAuthenticatesAndCapsLikeTheSidecar(t *testing.T) {
	var reached []string
	h := server.Door(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		reached = append(reached, r.Method+" "+r.URL.Path+" "+string(b))
		w.WriteHeader(http.StatusNoContent)
	}), server.DoorConfig{AuthToken: testToken, MaxMessageBytes: 16, MaxOtherBodyBytes: 8})
	for _, tc := range []struct {
		method, path, token, body string
		want                      int
		passes                    bool
	}{
		{http.MethodPost, "/run_sse", "", `{}`, http.StatusUnauthorized, false},
		{http.MethodPost, "/run_sse", "wrong", `{}`, http.StatusUnauthorized, false},
		{http.MethodPost, "/run_sse", testToken, strings.Repeat("x", 17), http.StatusRequestEntityTooLarge, false},
		{http.MethodPost, "/apps/goose/users/u/sessions", testToken, strings.Repeat("x", 9), http.StatusRequestEntityTooLarge, false},
		{http.MethodPost, "/run_sse", testToken, `{"a":1}`, http.StatusNoContent, true},
		{http.MethodGet, "/healthz", "", "", http.StatusNoContent, true},
		{http.MethodGet, "/.well-known/agent-card.json", "", "", http.StatusNoContent, true},
		{http.MethodOptions, "/run_sse", "", "", http.StatusNoContent, true},
	} {
		reached = nil
		r := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
		if tc.token != "" {
			r.Header.Set("Authorization", "Bearer "+tc.token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != tc.want || (len(reached) == 1) != tc.passes {
			t.Errorf("%s %s token %q: %d, reached %q; want %d, passes %v", tc.method, tc.path, tc.token, rec.Code, reached, tc.want, tc.passes)
		}
		if tc.passes && tc.body != "" && reached[0] != tc.method+" "+tc.path+" "+tc.body {
			t.Errorf("%s %s: the handler read %q", tc.method, tc.path, reached[0])
		}
	}
}
