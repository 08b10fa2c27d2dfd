// Package faults runs the operator under faults: a seeded injector of
// apiserver errors, lost responses and delays on the manager's requests,
// apiserver restarts, and a seeded workload of agent creates, changes and
// deletes, with the invariants checked after it (faults_test.go).
package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Kind is one kind of injected fault.
type Kind string

// The faults, in the order Rates lists them.
const (
	Conflict     Kind = "409"           // a Conflict Status, the request not sent
	TooMany      Kind = "429"           // Too Many Requests with Retry-After, not sent
	Unavailable  Kind = "503"           // Service Unavailable with Retry-After, not sent
	Internal     Kind = "500"           // an Internal Error Status, not sent
	LostResponse Kind = "lost-response" // sent and done by the apiserver, the answer lost
	Delay        Kind = "delay"         // sent after a pause
)

// kinds is the order in which a draw is matched against Rates.
var kinds = []Kind{Conflict, TooMany, Unavailable, Internal, LostResponse, Delay}

// Rates is how many requests in a thousand get each fault.
type Rates map[Kind]int

// WriteRates are the faults of writes (create, patch, apply, update, delete).
var WriteRates = Rates{Conflict: 80, TooMany: 30, Unavailable: 30, Internal: 30, LostResponse: 30, Delay: 150}

// ReadRates are the faults of reads (get, list). A lost read is a plain
// error, so it is left to the status codes.
var ReadRates = Rates{TooMany: 20, Unavailable: 20, Internal: 20, Delay: 100}

// MaxDelay bounds an injected delay.
const MaxDelay = 500 * time.Millisecond

// ErrLostResponse is what a client sees of a request whose answer was lost.
var ErrLostResponse = errors.New("faults: connection reset after the request was sent")

// Injector injects faults, drawn from one seeded source, into the requests
// of the transports it wraps. Discovery and watches pass untouched: a real
// manager that fails discovery exits and is restarted, and watches are cut
// by the apiserver restarts.
type Injector struct {
	Writes, Reads Rates

	mu     sync.Mutex
	rng    *rand.Rand
	counts map[Kind]int
	off    bool
}

// NewInjector returns an injector with WriteRates and ReadRates, drawing
// from seed.
func NewInjector(seed uint64) *Injector {
	return &Injector{Writes: WriteRates, Reads: ReadRates, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), counts: map[Kind]int{}}
}

// Wrap is a rest.Config WrapTransport.
func (in *Injector) Wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripper{in: in, next: next}
}

// Stop ends injection: later requests pass untouched (for the checks after
// a run).
func (in *Injector) Stop() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.off = true
}

// Counts returns how many faults of each kind were injected.
func (in *Injector) Counts() map[Kind]int {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make(map[Kind]int, len(in.counts))
	for k, n := range in.counts {
		out[k] = n
	}
	return out
}

// String lists the counts in a fixed order.
func (in *Injector) String() string {
	c := in.Counts()
	parts := make([]string, 0, len(kinds))
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s=%d", k, c[k]))
	}
	return strings.Join(parts, " ")
}

// draw picks the fault of one request, or "" for none, and a delay.
func (in *Injector) draw(r *http.Request) (Kind, time.Duration) {
	rates := in.Reads
	if isWrite(r.Method) {
		rates = in.Writes
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.off || !faultable(r) {
		return "", 0
	}
	n := in.rng.IntN(1000)
	for _, k := range kinds {
		if n < rates[k] {
			in.counts[k]++
			return k, time.Duration(in.rng.Int64N(int64(MaxDelay)))
		}
		n -= rates[k]
	}
	return "", 0
}

func isWrite(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// faultable reports a request for a resource (under /api/v1/ or
// /apis/GROUP/VERSION/) that is not a watch. Discovery (/api, /apis,
// /apis/GROUP/VERSION, /openapi, /version) is not.
func faultable(r *http.Request) bool {
	if r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1" {
		return false
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		return true // api/v1/RESOURCE...
	case len(parts) >= 4 && parts[0] == "apis":
		return true // apis/GROUP/VERSION/RESOURCE...
	}
	return false
}

type roundTripper struct {
	in   *Injector
	next http.RoundTripper
}

func (t roundTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	kind, d := t.in.draw(r)
	switch kind {
	case "":
		return t.next.RoundTrip(r)
	case Delay:
		if err := sleep(r.Context(), d); err != nil {
			return nil, err
		}
		return t.next.RoundTrip(r)
	case LostResponse:
		resp, err := t.next.RoundTrip(r)
		if err != nil {
			return nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return nil, ErrLostResponse
	}
	if r.Body != nil {
		_ = r.Body.Close()
	}
	return statusResponse(r, kind), nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// statusResponse is the apiserver's answer for an error: a metav1.Status.
func statusResponse(r *http.Request, kind Kind) *http.Response {
	st := metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure}
	h := http.Header{"Content-Type": []string{"application/json"}}
	switch kind {
	case Conflict:
		st.Code, st.Reason, st.Message = http.StatusConflict, metav1.StatusReasonConflict,
			"Operation cannot be fulfilled: the object has been modified; please apply your changes to the latest version and try again (injected)"
	case TooMany:
		st.Code, st.Reason, st.Message = http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests, "too many requests, please try again later (injected)"
		st.Details = &metav1.StatusDetails{RetryAfterSeconds: 1}
		h.Set("Retry-After", "1")
	case Unavailable:
		st.Code, st.Reason, st.Message = http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, "the server is currently unable to handle the request (injected)"
		st.Details = &metav1.StatusDetails{RetryAfterSeconds: 1}
		h.Set("Retry-After", "1")
	default:
		st.Code, st.Reason, st.Message = http.StatusInternalServerError, metav1.StatusReasonInternalError, "an error on the server has prevented the request from succeeding (injected)"
	}
	body, _ := json.Marshal(st) // a Status always marshals
	return &http.Response{
		StatusCode: int(st.Code), Status: fmt.Sprintf("%d %s", st.Code, http.StatusText(int(st.Code))),
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: io.NopCloser(strings.NewReader(string(body))), ContentLength: int64(len(body)), Request: r,
	}
}
