package jsonhttp_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/adk2goose/goose-operator/internal/jsonhttp"
)

func TestWrite(t *testing.T) {
	for _, tc := range []struct {
		name       string
		status     int
		v          any
		wantStatus int
		wantBody   string
	}{
		{"a value", http.StatusConflict, map[string]string{"error": "busy"}, http.StatusConflict, "{\"error\":\"busy\"}\n"},
		{"a value JSON cannot hold is a 500, not a cut-off answer", http.StatusOK, map[string]any{"f": func() {}},
			http.StatusInternalServerError, "{\"error\":\"internal error\"}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			jsonhttp.Write(rec, tc.status, tc.v)
			if rec.Code != tc.wantStatus || rec.Body.String() != tc.wantBody {
				t.Errorf("got %d %q, want %d %q", rec.Code, rec.Body.String(), tc.wantStatus, tc.wantBody)
			}
			if ct, cc := rec.Header().Get("Content-Type"), rec.Header().Get("Cache-Control"); ct != "application/json" || cc != "no-store" {
				t.Errorf("headers: Content-Type %q, Cache-Control %q", ct, cc)
			}
		})
	}
}
