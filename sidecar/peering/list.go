package peering

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"sync"
)

// PartialHeader on a merged session list counts the peers whose sessions
// are missing from it because they did not answer.
const PartialHeader = "X-Adk2goose-Partial"

// maxListBytes bounds one peer's session list.
const maxListBytes = 64 << 20

// serveList answers a user's session list with the sessions of every pod.
// A peer that does not answer leaves its sessions out (counted in
// PartialHeader) rather than failing the list: the ADK web UI loads it on
// every page.
func (r *Router) serveList(w http.ResponseWriter, req *http.Request, user string, next http.Handler) {
	local := &bufferedResponse{header: http.Header{}, status: http.StatusOK}
	next.ServeHTTP(local, req)
	var merged []json.RawMessage
	if local.status != http.StatusOK || json.Unmarshal(local.body.Bytes(), &merged) != nil {
		local.writeTo(w)
		return
	}
	peers, err := r.cfg.Peers(req.Context())
	missing := 0
	if err != nil {
		r.log.Warn("failed to list peer pods", "error", err)
		missing = 1
	}
	lists, failed := r.peerLists(req, peers)
	missing += failed
	for _, l := range lists {
		merged = append(merged, l...)
	}
	if merged == nil {
		merged = []json.RawMessage{}
	}
	b, err := json.Marshal(merged)
	if err != nil {
		local.writeTo(w)
		return
	}
	maps.Copy(w.Header(), local.header)
	w.Header().Del("Content-Length")
	if missing > 0 {
		r.log.Warn("session list is missing the sessions of peer pods that did not answer", "user", user, "peers", missing)
		w.Header().Set(PartialHeader, strconv.Itoa(missing))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// peerLists fetches the same list from every peer.
func (r *Router) peerLists(req *http.Request, peers []string) (lists [][]json.RawMessage, failed int) {
	ctx, cancel := context.WithTimeout(req.Context(), r.cfg.LookupTimeout)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, p := range peers {
		wg.Go(func() {
			l, err := r.peerList(ctx, req, p)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				r.log.Warn("a peer pod did not list its sessions", "peer", p, "error", err)
				failed++
				return
			}
			lists = append(lists, l)
		})
	}
	wg.Wait()
	return lists, failed
}

func (r *Router) peerList(ctx context.Context, in *http.Request, peer string) ([]json.RawMessage, error) {
	u, err := url.Parse(peer)
	if err != nil {
		return nil, fmt.Errorf("failed to parse peer URL %q: %w", peer, err)
	}
	u.Path, u.RawPath, u.RawQuery = in.URL.Path, in.URL.RawPath, in.URL.RawQuery
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("failed to build session list request: %w", err)
	}
	r.hop(req)
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("failed to list sessions: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("failed to list sessions: %s", resp.Status)
	}
	var l []json.RawMessage
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxListBytes)).Decode(&l); err != nil {
		return nil, fmt.Errorf("failed to decode session list: %w", err)
	}
	return l, nil
}

// bufferedResponse holds a local handler's response for merging.
type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
	wrote  bool
}

func (b *bufferedResponse) Header() http.Header { return b.header }

func (b *bufferedResponse) WriteHeader(status int) {
	if !b.wrote {
		b.status, b.wrote = status, true
	}
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	b.WriteHeader(http.StatusOK)
	return b.body.Write(p)
}

func (b *bufferedResponse) writeTo(w http.ResponseWriter) {
	maps.Copy(w.Header(), b.header)
	w.WriteHeader(b.status)
	_, _ = w.Write(b.body.Bytes())
}
