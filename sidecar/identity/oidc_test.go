package identity_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"go.uber.org/goleak"

	"github.com/adk2goose/goose-operator/sidecar/identity"
)

// issuer is a local OIDC issuer: discovery and a JWKS of its current key.
type issuer struct {
	srv  *httptest.Server
	key  *rsa.PrivateKey
	kid  string
	down atomic.Bool
}

func newIssuer(t testing.TB) *issuer {
	t.Helper()
	is := &issuer{key: newRSAKey(t), kid: "k1"}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{
			"issuer": is.srv.URL, "jwks_uri": is.srv.URL + "/keys",
			"id_token_signing_alg_values_supported": []string{"RS256"},
		})
	})
	mux.HandleFunc("/keys", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
			{Key: &is.key.PublicKey, KeyID: is.kid, Algorithm: "RS256", Use: "sig"},
		}})
	})
	is.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if is.down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(is.srv.Close)
	return is
}

func newRSAKey(t testing.TB) *rsa.PrivateKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// claims of a token valid for the test's verifier; change one to break it.
func (is *issuer) claims(sub string) map[string]any {
	now := time.Now()
	return map[string]any{
		"iss": is.srv.URL, "aud": "helper", "sub": sub, "groups": []string{"team"},
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(time.Hour).Unix(),
	}
}

func sign(t testing.TB, alg jose.SignatureAlgorithm, key any, kid string, claims map[string]any) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, (&jose.SignerOptions{}).WithHeader("kid", kid).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := json.Marshal(claims)
	jws, err := s.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	out, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (is *issuer) token(t testing.TB, claims map[string]any) string {
	return sign(t, jose.RS256, is.key, is.kid, claims)
}

func with(m map[string]any, k string, v any) map[string]any {
	m[k] = v
	return m
}

func TestOIDCTokenMatrix(t *testing.T) {
	is := newIssuer(t)
	v, err := identity.NewOIDC(t.Context(), identity.OIDCConfig{IssuerURL: is.srv.URL, Audience: "helper", AllowedGroups: []string{"team"}})
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	pubDER, _ := x509.MarshalPKIXPublicKey(&is.key.PublicKey)
	valid := is.token(t, is.claims("alice"))

	for _, tc := range []struct {
		name, token string
		want        int
	}{
		{"valid", valid, http.StatusOK},
		{"forged signature", sign(t, jose.RS256, newRSAKey(t), is.kid, is.claims("alice")), http.StatusUnauthorized},
		{"expired", is.token(t, with(is.claims("alice"), "exp", time.Now().Add(-time.Hour).Unix())), http.StatusUnauthorized},
		{"not yet valid", is.token(t, with(is.claims("alice"), "nbf", time.Now().Add(time.Hour).Unix())), http.StatusUnauthorized},
		{"wrong audience", is.token(t, with(is.claims("alice"), "aud", "other-agent")), http.StatusUnauthorized},
		{"wrong issuer", is.token(t, with(is.claims("alice"), "iss", "https://evil.example")), http.StatusUnauthorized},
		{"alg none", b64([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + b64(mustJSON(is.claims("alice"))) + ".", http.StatusUnauthorized},
		{"HS256 keyed with the public key", sign(t, jose.HS256, pubDER, is.kid, is.claims("alice")), http.StatusUnauthorized},
		{"unknown kid", sign(t, jose.RS256, newRSAKey(t), "k2", is.claims("alice")), http.StatusUnauthorized},
		{"no user claim", is.token(t, with(is.claims(""), "sub", nil)), http.StatusUnauthorized},
		{"outside the allowed groups", is.token(t, with(is.claims("mallory"), "groups", []string{"other"})), http.StatusForbidden},
		{"not a JWT", "garbage", http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := verify(v, tc.token)
			got := http.StatusOK
			if err != nil {
				got = identity.Status(err)
				if strings.Contains(err.Error(), tc.token) {
					t.Fatalf("the error holds the token: %v", err)
				}
			} else if c.User != "alice" || !c.In([]string{"team"}) {
				t.Fatalf("caller %+v", c)
			}
			if got != tc.want {
				t.Fatalf("status %d (%v), want %d", got, err, tc.want)
			}
		})
	}
	// After every bad token the verifier still accepts a good one.
	if _, err := verify(v, is.token(t, is.claims("alice"))); err != nil {
		t.Fatalf("a valid token after the bad ones: %v", err)
	}

	t.Run("rotated key", func(t *testing.T) {
		is.key, is.kid = newRSAKey(t), "k3"
		if _, err := verify(v, is.token(t, is.claims("alice"))); err != nil {
			t.Fatalf("a token of the rotated key: %v", err)
		}
	})

	t.Run("issuer down", func(t *testing.T) {
		is.down.Store(true)
		defer is.down.Store(false)
		// A token of a key the verifier has not seen needs the JWKS.
		is.key, is.kid = newRSAKey(t), "k4"
		_, err := verify(v, is.token(t, is.claims("alice")))
		if identity.Status(err) != http.StatusServiceUnavailable {
			t.Fatalf("verify with the issuer down: %v, want 503", err)
		}
		fresh, err := identity.NewOIDC(t.Context(), identity.OIDCConfig{IssuerURL: is.srv.URL, Audience: "helper"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := verify(fresh, valid); identity.Status(err) != http.StatusServiceUnavailable {
			t.Fatalf("discovery with the issuer down: %v, want 503", err)
		}
	})
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
