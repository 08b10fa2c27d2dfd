// Package servertest runs a real adk2goose server (sidecar/server) on a
// loopback port for tests in other packages.
package servertest

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/server"
)

// Sidecar is a running server.
type Sidecar struct {
	// URL is the base URL, http://127.0.0.1:<port>.
	URL string
	// Addr is host:port.
	Addr string
	// Server is the server itself.
	Server *server.Server

	stop func()
	once sync.Once
}

// Start serves cfg on a free loopback port until Stop or the end of the test.
// Left empty, PublicBaseURL becomes the server's own URL, StartOptions'
// working dir /tmp, SSEWriteTimeout a minute and the logger discards.
func Start(t testing.TB, cfg server.Config) *Sidecar {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("failed to listen: %v", err)
	}
	base := "http://" + ln.Addr().String()
	if cfg.PublicBaseURL == "" {
		cfg.PublicBaseURL = base
	}
	if cfg.Peers != nil && cfg.PeerURL == "" {
		cfg.PeerURL = base // the URL peers list it by, as the binary's pod IP gives
	}
	if cfg.StartOptions == (goose.StartOptions{}) {
		cfg.StartOptions.WorkingDir = "/tmp"
	}
	if cfg.SSEWriteTimeout == 0 {
		cfg.SSEWriteTimeout = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	srv, err := server.New(context.Background(), cfg)
	if err != nil {
		_ = ln.Close()
		t.Fatalf("failed to create server: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln, 5*time.Second) }()
	s := &Sidecar{URL: base, Addr: ln.Addr().String(), Server: srv}
	s.stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sidecar serve: %v", err)
		}
		if err := srv.Close(); err != nil {
			t.Errorf("sidecar close: %v", err)
		}
	}
	t.Cleanup(s.Stop)
	return s
}

// Stop drains and closes the server; its port then refuses connections.
// Calling it again does nothing.
func (s *Sidecar) Stop() { s.once.Do(s.stop) }
