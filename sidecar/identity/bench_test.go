package identity_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/adk2goose/goose-operator/internal/testing/percentile"
	"github.com/adk2goose/goose-operator/sidecar/identity"
)

// fakeReviewAPI answers every TokenReview and SubjectAccessReview with yes,
// or with 500 while down.
type fakeReviewAPI struct {
	config *rest.Config
	down   atomic.Bool
}

func newFakeReviewAPI(tb testing.TB) *fakeReviewAPI {
	tb.Helper()
	api := &fakeReviewAPI{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if api.down.Load() {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasSuffix(r.URL.Path, "/tokenreviews"):
			_ = json.NewEncoder(w).Encode(map[string]any{
				"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
				"status": map[string]any{"authenticated": true, "audiences": []string{testAudience},
					"user": map[string]any{"username": "system:serviceaccount:team:alice", "groups": []string{"system:serviceaccounts"}}},
			})
		case strings.HasSuffix(r.URL.Path, "/subjectaccessreviews"):
			_ = json.NewEncoder(w).Encode(map[string]any{
				"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "status": map[string]any{"allowed": true},
			})
		default:
			http.NotFound(w, r)
		}
	}))
	tb.Cleanup(srv.Close)
	api.config = &rest.Config{Host: srv.URL}
	return api
}

// BenchmarkVerifyCacheHit measures one identity check whose answer is
// cached, and reports its median as p50-ns.
func BenchmarkVerifyCacheHit(b *testing.B) {
	b.Run("kubernetes", func(b *testing.B) {
		v, err := identity.NewKubernetes(identity.KubernetesConfig{REST: newFakeReviewAPI(b).config, Audience: testAudience, Namespace: testNS, Agent: testAgent})
		if err != nil {
			b.Fatal(err)
		}
		benchHits(b, v, "a-service-account-token")
	})
	b.Run("oidc", func(b *testing.B) {
		is := newIssuer(b)
		v, err := identity.NewOIDC(b.Context(), identity.OIDCConfig{IssuerURL: is.srv.URL, Audience: "helper"})
		if err != nil {
			b.Fatal(err)
		}
		benchHits(b, v, is.token(b, is.claims("alice")))
	})
}

func benchHits(b *testing.B, v identity.Verifier, token string) {
	r := httptest.NewRequest(http.MethodGet, "/list-apps", nil)
	r.Header.Set("Authorization", "Bearer "+token)
	if _, err := v.Verify(r); err != nil { // fills the caches
		b.Fatal(err)
	}
	took := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if _, err := v.Verify(r); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	b.ReportMetric(float64(percentile.Of(took, 50).Nanoseconds()), "p50-ns")
}
