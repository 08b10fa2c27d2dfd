package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	streamhttp "k8s.io/streaming/pkg/httpstream"
	streamspdy "k8s.io/streaming/pkg/httpstream/spdy"
)

// fakePortForward plays the API server's pods/portforward subresource with
// the kubelet's side of the portforward.k8s.io protocol behind it, relaying
// every forwarded connection to target. It refuses the WebSocket tunnel, so
// the client must fall back to SPDY, as it does against older API servers.
type fakePortForward struct {
	*httptest.Server
	target string
	mu     sync.Mutex
	paths  []string
	ports  []string
	// tunnelTried: the client first asked for the WebSocket tunnel.
	tunnelTried bool
	// kill ends every port-forward connection, as a pod's deletion does.
	kill chan struct{}
}

func newFakePortForward(t *testing.T, target string) *fakePortForward {
	t.Helper()
	f := &fakePortForward{target: target, kill: make(chan struct{})}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

func (f *fakePortForward) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/portforward") {
		f.mu.Lock()
		f.tunnelTried = f.tunnelTried || streamhttp.IsUpgradeRequest(r)
		f.mu.Unlock()
		http.Error(w, "only SPDY port-forward here", http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.paths = append(f.paths, r.URL.Path)
	f.mu.Unlock()
	if _, err := streamhttp.Handshake(r, w, []string{portforward.PortForwardProtocolV1Name}); err != nil {
		return
	}
	var (
		mu      sync.Mutex
		pending = map[string]streamhttp.Stream{}
		wg      sync.WaitGroup
	)
	conn := streamspdy.NewResponseUpgrader().UpgradeResponse(w, r, func(s streamhttp.Stream, replySent <-chan struct{}) error {
		h := s.Headers()
		id := h.Get(corev1.PortForwardRequestIDHeader)
		mu.Lock()
		defer mu.Unlock()
		if h.Get(corev1.StreamType) == corev1.StreamTypeError {
			pending[id] = s
			return nil
		}
		errStream := pending[id]
		delete(pending, id)
		f.mu.Lock()
		f.ports = append(f.ports, h.Get(corev1.PortHeader))
		f.mu.Unlock()
		wg.Go(func() {
			<-replySent
			defer s.Close()
			if errStream != nil {
				defer errStream.Close() // EOF on it tells the client the pair is done
			}
			c, err := net.Dial("tcp", f.target)
			if err != nil {
				if errStream != nil {
					_, _ = errStream.Write([]byte(err.Error()))
				}
				return
			}
			defer c.Close()
			go func() { _, _ = io.Copy(c, s) }()
			_, _ = io.Copy(s, c)
		})
		return nil
	})
	if conn == nil {
		return
	}
	select {
	case <-conn.CloseChan():
	case <-f.kill:
		_ = conn.Close()
	}
	wg.Wait()
}

// TestSPDYForwarder runs the production forwarder (client-go's portforward
// over SPDY, after the WebSocket attempt fails) against the fake, to a real
// sidecar, and streams /run_sse through it.
func TestSPDYForwarder(t *testing.T) {
	const token = "spdy-token"
	fake := newFakePortForward(t, startSidecar(t, token))
	fwd, err := newSPDYForwarder(&rest.Config{Host: fake.URL}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "coder-0"}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	local, done, err := fwd.Forward(ctx, pod, 9090)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(local, "127.0.0.1:") {
		t.Fatalf("local end %s", local)
	}
	apps, me, err := probe(ctx, urlOf(local), staticCredential("test", token))
	if err != nil || len(apps) != 1 || apps[0] != "coder" || me.Verified {
		t.Fatalf("probe: %v %+v %v", apps, me, err)
	}
	if _, _, err := probe(ctx, urlOf(local), staticCredential("test", "wrong")); err == nil || !strings.Contains(err.Error(), "rejected the token") {
		t.Fatalf("wrong token: %v", err)
	}
	fake.mu.Lock()
	paths, ports, tunnel := fake.paths, fake.ports, fake.tunnelTried
	fake.mu.Unlock()
	if !tunnel {
		t.Error("no WebSocket attempt before SPDY (kubectl tries it first)")
	}
	if len(paths) == 0 || paths[0] != "/api/v1/namespaces/team/pods/coder-0/portforward" || len(ports) == 0 || ports[0] != "9090" {
		t.Fatalf("forwarded via %v to ports %v", paths, ports)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("forwarder did not stop")
	}
}

// TestSPDYForwarderLost: when the pod's stream goes away, done reports it.
func TestSPDYForwarderLost(t *testing.T) {
	fake := newFakePortForward(t, startSidecar(t, "x"))
	fwd, err := newSPDYForwarder(&rest.Config{Host: fake.URL}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	_, done, err := fwd.Forward(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "p"}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	close(fake.kill)
	select {
	case err := <-done:
		if !errors.Is(err, portforward.ErrLostConnectionToPod) {
			t.Fatalf("done: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("loss not reported")
	}
}

// TestSPDYForwarderRefused: an API server that refuses the upgrade (as for
// a missing pod) fails Forward with nothing left running.
func TestSPDYForwarderRefused(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `pods "p" not found`, http.StatusNotFound)
	}))
	defer ts.Close()
	fwd, err := newSPDYForwarder(&rest.Config{Host: ts.URL}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := fwd.Forward(t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "p"}}, 1); err == nil {
		t.Fatal("forwarded through a refusing API server")
	}
}

func urlOf(hostport string) *url.URL { return &url.URL{Scheme: "http", Host: hostport} }
