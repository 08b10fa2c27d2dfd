// Package bearer is an http.RoundTripper that authenticates every request
// with a bearer token, for clients of the sidecar (the demo, the e2e client,
// tests) whose libraries take an *http.Client rather than a header.
package bearer

import "net/http"

// Transport adds "Authorization: Bearer <Token>" to each request and sends it
// with Base (http.DefaultTransport when nil).
type Transport struct {
	Token string
	Base  http.RoundTripper
}

// RoundTrip sends a copy of r carrying the token; r itself is not changed,
// as the RoundTripper contract requires.
func (t Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+t.Token)
	return base.RoundTrip(r)
}
