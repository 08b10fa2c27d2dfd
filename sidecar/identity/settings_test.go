package identity_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/adk2goose/goose-operator/sidecar/identity"
)

func TestSettings(t *testing.T) {
	read := func(body string) (identity.Settings, error) {
		t.Helper()
		p := filepath.Join(t.TempDir(), "auth.json")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return identity.ReadSettings(p)
	}
	s, err := read(`{"mode":"token"}`)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := s.Verifier(t.Context()); err != nil || v != nil {
		t.Fatalf("token mode: verifier %v, error %v; want none", v, err)
	}
	for name, body := range map[string]string{
		"unknown mode":            `{"mode":"mtls"}`,
		"oidc without settings":   `{"mode":"oidc"}`,
		"kubernetes, no settings": `{"mode":"kubernetes"}`,
		"oidc without issuer":     `{"mode":"oidc","oidc":{"audience":"a"}}`,
	} {
		s, err := read(body)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := s.Verifier(t.Context()); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := read(`{"mode":"oidc","odic":{}}`); err == nil {
		t.Error("a misspelt field was accepted")
	}
}
