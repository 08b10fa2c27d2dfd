package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/adk2goose/goose-operator/internal/testing/syncbuf"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
)

// TestAuthConfigFileSelectsTheMode: with -auth-config-file in mode oidc a
// caller's token is checked against the issuer (here unreachable: 503),
// and a request without one gets 401.
func TestAuthConfigFileSelectsTheMode(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	serve := goosetest.NewServe(t)
	tokenFile := write("token", "tok-123")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	issuer := "http://" + ln.Addr().String() // nothing listens there once closed
	_ = ln.Close()
	authFile := write("auth.json", `{"mode":"oidc","oidc":{"issuerURL":"`+issuer+`","audience":"helper"}}`)
	env := envMap(map[string]string{
		"GOOSE_URL": serve.URL, "GOOSE_SECRET_FILE": write("goose-secret", serve.Secret),
		"ADK2GOOSE_DATA_DIR": filepath.Join(dir, "data"), "GOOSE_WORKING_DIR": filepath.Join(dir, "workspace"),
	})
	ctx, cancel := context.WithCancel(context.Background())
	base, done := startRun(ctx, t, []string{"-listen", "127.0.0.1:0", "-auth-token-file", tokenFile, "-auth-config-file", authFile}, env, &syncbuf.Buffer{})
	defer func() {
		cancel()
		<-done
	}()
	for _, tc := range []struct {
		token string
		want  int
	}{
		{"", http.StatusUnauthorized},
		{"a-caller's-jwt", http.StatusServiceUnavailable},
	} {
		req, _ := http.NewRequest(http.MethodGet, base+"/list-apps", nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Fatalf("token %q: %d %s, want %d", tc.token, resp.StatusCode, b, tc.want)
		}
	}
}
