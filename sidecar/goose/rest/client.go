// Package rest is the goose.Backend for `goosed`, the REST + SSE server of
// goose 1.37–1.41 (shared/reference/goose-rest-api.md).
package rest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/adk2goose/goose-operator/sidecar/goose"
)

// Config configures a Client.
type Config struct {
	// URL is goosed's base URL, e.g. http://127.0.0.1:3000.
	URL string
	// SecretKey is sent as X-Secret-Key on every call (GOOSE_SERVER__SECRET_KEY).
	SecretKey string
	// HTTPClient is used for every call. It must not set a Timeout, which
	// would cut long replies. Default: a client with its own transport.
	HTTPClient *http.Client
	// MaxEventBytes bounds one SSE line and one event; 0 selects
	// the SSE reader's default (16 MiB). A larger one ends its reply only.
	MaxEventBytes int
	// MaxMessageBytes caps a user message, JSON-encoded; default
	// goose.DefaultMaxMessageBytes.
	MaxMessageBytes int
	// Retry tunes retries; zero fields take the defaults of issue 3 §4.
	Retry RetryPolicy
}

// RetryPolicy says how long to wait before retrying a refused call.
type RetryPolicy struct {
	// NotReady is the wait before the single retry after 412/424. Default 1 s.
	NotReady time.Duration
	// RateLimited are the waits before each retry after 429. Default 1 s,
	// 2 s, 4 s. A Retry-After header replaces the step's wait.
	RateLimited []time.Duration
	// MaxRetryAfter caps an honoured Retry-After; a longer one is not waited
	// for and the call fails with goose.ErrRateLimited. Default 30 s.
	MaxRetryAfter time.Duration
	// Sleep waits d or until ctx ends. Tests inject it to avoid real waits.
	Sleep func(ctx context.Context, d time.Duration) error
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.NotReady <= 0 {
		p.NotReady = time.Second
	}
	if p.RateLimited == nil {
		p.RateLimited = []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}
	}
	if p.MaxRetryAfter <= 0 {
		p.MaxRetryAfter = 30 * time.Second
	}
	if p.Sleep == nil {
		p.Sleep = sleep
	}
	return p
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// errClientClosed ends the streams still running when Close is called.
var errClientClosed = errors.New("goose REST client closed")

// Client talks to one goosed. It is safe for concurrent use.
type Client struct {
	base     string
	key      string
	hc       *http.Client
	ownHC    bool
	maxEvent int
	maxMsg   int
	retry    RetryPolicy

	mu      sync.Mutex
	closed  bool
	streams map[*stream]struct{} // in-flight /reply
}

// stream is one in-flight /reply, tracked so Close can end it.
type stream struct {
	cancel context.CancelFunc
	// closed is set (under Client.mu) by Close before cancel.
	closed bool
}

var _ goose.Backend = (*Client)(nil)

// New returns a Client for the goosed at cfg.URL.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("failed to parse goosed URL %q: want http(s)://host:port", cfg.URL)
	}
	c := &Client{
		base:     strings.TrimRight(u.String(), "/"),
		key:      cfg.SecretKey,
		hc:       cfg.HTTPClient,
		maxEvent: cfg.MaxEventBytes,
		maxMsg:   cfg.MaxMessageBytes,
		retry:    cfg.Retry.withDefaults(),
		streams:  make(map[*stream]struct{}),
	}
	if c.hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		// Every concurrent reply holds one HTTP/1.1 connection to goosed.
		// An idle pool smaller than the concurrency broke POSTs given a
		// connection being closed (golang/go#42650), against the target of
		// 2,000 concurrent streams without an error: the pool is not capped,
		// and a short IdleConnTimeout closes what a burst left.
		tr.MaxIdleConns = 0 // no limit over all hosts: there is one
		tr.MaxIdleConnsPerHost = 1 << 16
		tr.IdleConnTimeout = 10 * time.Second
		c.hc, c.ownHC = &http.Client{Transport: tr}, true
	}
	return c, nil
}

// Flavor implements goose.Backend.
func (c *Client) Flavor() goose.Flavor { return goose.FlavorGoosed }

// Close ends every in-flight reply and releases idle connections.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	for st := range c.streams {
		st.closed = true
		st.cancel()
	}
	c.mu.Unlock()
	if c.ownHC {
		c.hc.CloseIdleConnections()
	}
	return nil
}

// Health implements goose.Backend: GET /status answers 200 "ok" without auth
// (reference §2.4); the key is sent anyway, it is harmless there.
func (c *Client) Health(ctx context.Context) error {
	if err := c.call(ctx, http.MethodGet, "/status", nil, nil, nil); err != nil {
		return fmt.Errorf("failed to check health: %w", err)
	}
	return nil
}

// StartSession implements goose.Backend: /agent/start, then /agent/resume
// with load_model_and_extensions so the agent has a provider (without it a
// new session's reply fails with "Provider not set", reference §2.5), then
// /agent/update_provider and /agent/update_session when asked.
func (c *Client) StartSession(ctx context.Context, opts goose.StartOptions) (goose.Session, error) {
	var started wireSession
	if err := c.call(ctx, http.MethodPost, "/agent/start", startAgentRequest{WorkingDir: opts.WorkingDir}, &started, nil); err != nil {
		return goose.Session{}, fmt.Errorf("failed to start session: %w", err)
	}
	s, provider, err := c.resume(ctx, started.ID)
	if err != nil {
		return goose.Session{}, fmt.Errorf("failed to start session %s: %w", started.ID, err)
	}
	if opts.Provider != "" || opts.Model != "" {
		if opts.Provider != "" {
			provider = opts.Provider
		}
		if provider == "" {
			return goose.Session{}, fmt.Errorf("failed to set model of session %s: model %q given without a provider and goose reports none", started.ID, opts.Model)
		}
		req := updateProviderRequest{Provider: provider, SessionID: started.ID, Model: opts.Model}
		if err := c.call(ctx, http.MethodPost, "/agent/update_provider", req, nil, goose.ErrSessionNotFound); err != nil {
			return goose.Session{}, fmt.Errorf("failed to set provider of session %s: %w", started.ID, err)
		}
	}
	if opts.Mode != "" {
		req := updateSessionRequest{SessionID: started.ID, GooseMode: opts.Mode}
		if err := c.call(ctx, http.MethodPost, "/agent/update_session", req, nil, goose.ErrSessionNotFound); err != nil {
			return goose.Session{}, fmt.Errorf("failed to set mode of session %s: %w", started.ID, err)
		}
	}
	return s, nil
}

// ResumeSession implements goose.Backend.
func (c *Client) ResumeSession(ctx context.Context, id string) (goose.Session, error) {
	s, _, err := c.resume(ctx, id)
	if err != nil {
		return goose.Session{}, fmt.Errorf("failed to resume session %s: %w", id, err)
	}
	return s, nil
}

func (c *Client) resume(ctx context.Context, id string) (goose.Session, string, error) {
	var resp resumeAgentResponse
	req := resumeAgentRequest{SessionID: id, LoadModelAndExtensions: true}
	if err := c.call(ctx, http.MethodPost, "/agent/resume", req, &resp, goose.ErrSessionNotFound); err != nil {
		return goose.Session{}, "", err
	}
	provider := ""
	if resp.Session.ProviderName != nil {
		provider = *resp.Session.ProviderName
	}
	return toSession(&resp.Session), provider, nil
}

// DeleteSession implements goose.Backend. After 1.37 only GET remains on
// /sessions/{id}, so DELETE answers 405 (→ ErrUnsupported); 404 is an
// unknown session.
func (c *Client) DeleteSession(ctx context.Context, id string) error {
	if err := c.call(ctx, http.MethodDelete, "/sessions/"+url.PathEscape(id), nil, nil, goose.ErrSessionNotFound); err != nil {
		return fmt.Errorf("failed to delete session %s: %w", id, err)
	}
	return nil
}

// Usage implements goose.Backend from the session's accumulated_* fields
// (1.37) or its accumulated_usage object (1.41).
func (c *Client) Usage(ctx context.Context, sessionID string) (goose.Usage, error) {
	var ws wireSession
	if err := c.call(ctx, http.MethodGet, "/sessions/"+url.PathEscape(sessionID), nil, &ws, goose.ErrSessionNotFound); err != nil {
		return goose.Usage{}, fmt.Errorf("failed to get usage of session %s: %w", sessionID, err)
	}
	return toSession(&ws).Usage, nil
}

// Approve implements goose.Backend: POST /action-required/tool-confirmation
// (reference §2.2), which unblocks the waiting tool call.
func (c *Client) Approve(ctx context.Context, sessionID, requestID string, decision goose.Decision) error {
	switch decision {
	case goose.AllowOnce, goose.AlwaysAllow, goose.DenyOnce, goose.AlwaysDeny, goose.CancelDecision:
	default:
		return fmt.Errorf("failed to answer approval %s: unknown decision %q", requestID, decision)
	}
	req := confirmToolActionRequest{ID: requestID, Action: string(decision), SessionID: sessionID}
	if err := c.call(ctx, http.MethodPost, "/action-required/tool-confirmation", req, nil, goose.ErrSessionNotFound); err != nil {
		return fmt.Errorf("failed to answer approval %s: %w", requestID, err)
	}
	return nil
}

func (c *Client) track(st *stream) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.streams[st] = struct{}{}
	return true
}

func (c *Client) untrack(st *stream) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.streams, st)
}

// closedBy reports errClientClosed when Close ended st, nil otherwise.
func (c *Client) closedBy(st *stream) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.closed {
		return errClientClosed
	}
	return nil
}

// call sends a JSON request (body may be nil), checks for 2xx and decodes
// the JSON answer into out when out is not nil. notFound is the error a 404
// means for this route (nil: a plain *goose.HTTPError).
func (c *Client) call(ctx context.Context, method, path string, body, out any, notFound error) error {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return fmt.Errorf("failed to encode request: %w", err)
		}
	}
	resp, err := c.send(ctx, method, path, payload) //nolint:bodyclose // closed by drainClose below
	if err != nil {
		return err
	}
	defer drainClose(resp.Body)
	if resp.StatusCode/100 != 2 {
		return statusError(resp, notFound)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("failed to decode %s %s response: %w", method, path, err)
	}
	return nil
}

// send performs one logical request with the retries of issue 3 §4.
//
// Only refusals are retried: 412/424 (agent not ready) and 429 (rate
// limited) are answers goosed gives instead of acting on the request, so
// sending the same body again cannot run it twice, even for POST /reply.
// Transport errors and 5xx are never retried: the body may have been taken
// and a user message could be duplicated. A refused connection is reported
// as goose.ErrUnavailable for the caller's own readiness logic.
func (c *Client) send(ctx context.Context, method, path string, payload []byte) (*http.Response, error) {
	notReadyRetried, rateRetries := false, 0
	for {
		var body io.Reader
		if payload != nil {
			body = bytes.NewReader(payload)
		}
		req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
		if err != nil {
			return nil, fmt.Errorf("failed to build request: %w", err)
		}
		req.Header.Set("X-Secret-Key", c.key)
		if payload != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := c.hc.Do(req)
		if err != nil {
			return nil, transportError(err)
		}
		var wait time.Duration
		switch resp.StatusCode {
		case http.StatusPreconditionFailed, http.StatusFailedDependency:
			if notReadyRetried {
				return resp, nil
			}
			notReadyRetried, wait = true, c.retry.NotReady
		case http.StatusTooManyRequests:
			if rateRetries >= len(c.retry.RateLimited) {
				return resp, nil
			}
			wait = c.retry.RateLimited[rateRetries]
			if ra, ok := retryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
				if ra > c.retry.MaxRetryAfter {
					return resp, nil
				}
				wait = ra
			}
			rateRetries++
		default:
			return resp, nil
		}
		drainClose(resp.Body)
		if err := c.retry.Sleep(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// retryAfter parses Retry-After as delta-seconds or an HTTP date.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 {
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

func transportError(err error) error {
	var opErr *net.OpError
	if errors.Is(err, syscall.ECONNREFUSED) || (errors.As(err, &opErr) && opErr.Op == "dial") {
		return fmt.Errorf("%w: %w", goose.ErrUnavailable, err)
	}
	return err
}

// maxErrorBody bounds how much of an error answer is kept in *HTTPError.
const maxErrorBody = 64 << 10

func statusError(resp *http.Response, notFound error) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	he := &goose.HTTPError{StatusCode: resp.StatusCode, Body: strings.TrimSpace(string(b))}
	var sentinel error
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		sentinel = goose.ErrUnauthorized
	case http.StatusNotFound:
		sentinel = notFound
	case http.StatusMethodNotAllowed:
		// An existing path without this method: a route later versions dropped.
		sentinel = goose.ErrUnsupported
	case http.StatusPreconditionFailed, http.StatusFailedDependency:
		sentinel = goose.ErrNotReady
	case http.StatusTooManyRequests:
		sentinel = goose.ErrRateLimited
	case http.StatusServiceUnavailable:
		sentinel = goose.ErrUnavailable
	}
	if sentinel == nil {
		return he
	}
	return fmt.Errorf("%w: %w", sentinel, he)
}

func drainClose(body io.ReadCloser) {
	// Reading a little lets the connection be reused; a long body is not
	// worth waiting for.
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 4<<10))
	_ = body.Close()
}

func toSession(ws *wireSession) goose.Session {
	s := goose.Session{
		ID:           ws.ID,
		Name:         ws.Name,
		WorkingDir:   ws.WorkingDir,
		CreatedAt:    ws.CreatedAt,
		UpdatedAt:    ws.UpdatedAt,
		MessageCount: ws.MessageCount,
		Usage: goose.Usage{
			InputTokens:  deref(ws.AccumulatedInputTokens),
			OutputTokens: deref(ws.AccumulatedOutputTokens),
			TotalTokens:  deref(ws.AccumulatedTotalTokens),
			Cost:         copyFloat(ws.AccumulatedCost),
		},
	}
	if u := ws.AccumulatedUsage; u != nil { // 1.41 shape
		s.Usage.InputTokens = deref(u.InputTokens)
		s.Usage.OutputTokens = deref(u.OutputTokens)
		s.Usage.TotalTokens = deref(u.TotalTokens)
	}
	s.Usage = s.Usage.Normalized()
	return s
}
