// Command goose is the e2e cluster's stand-in for the official goose image's
// binary: the fake servers of sidecar/goose/goosetest behind the command lines
// the operator runs.
//
//	goose serve --host H --port P    ACP (`goose serve`, the default flavor)
//	goosed agent                     REST (`goosed`, flavor goosed; GOOSE_HOST, GOOSE_PORT)
//
// Like goose it reads GOOSE_SERVER__SECRET_KEY and refuses to serve without
// it (goose 1.41+), keeps its ACP sessions under GOOSE_PATH_ROOT (written when
// it stops on SIGTERM; goose writes as it goes) and knows them after a restart.
// `goose serve` starts each session's enabled stdio extensions from goose's
// config as goose does (extensions.go); the scripted model (script.go) echoes
// the user's text, lists or calls those extensions' tools when asked, and
// names the pod and the goose session that answered, so tests see where a
// turn ran.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
)

func main() {
	if err := run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "goose:", err)
		os.Exit(2)
	}
}

func run(args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	secret := strings.TrimSpace(os.Getenv("GOOSE_SERVER__SECRET_KEY"))
	if secret == "" {
		return errors.New("GOOSE_SERVER__SECRET_KEY is not set (goose 1.41+ refuses to serve without it)")
	}
	pod, _ := os.Hostname()
	extensions := newExtensionHost(gooseConfigPaths())
	defer extensions.Close()
	script := newScript(extensions, pod)

	if filepath.Base(args[0]) == "goosed" {
		if len(args) < 2 || args[1] != "agent" {
			return errors.New("usage: goosed agent")
		}
		l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", net.JoinHostPort(envOr("GOOSE_HOST", "127.0.0.1"), envOr("GOOSE_PORT", "3000")))
		if err != nil {
			return fmt.Errorf("failed to listen: %w", err)
		}
		g := goosetest.NewGoosed(goosetest.GoosedOptions{
			SecretKey: secret, Script: script, Listener: l,
			DefaultProvider: os.Getenv("GOOSE_PROVIDER"), DefaultModel: os.Getenv("GOOSE_MODEL"),
		})
		fmt.Println("goosed (e2e stand-in) listening on", g.URL)
		<-ctx.Done()
		g.Close()
		return nil
	}

	if len(args) < 2 || args[1] != "serve" {
		return errors.New("usage: goose serve --host HOST --port PORT (this stand-in implements only serve)")
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	h := fs.String("host", "127.0.0.1", "address to bind")
	p := fs.String("port", "3284", "port to bind")
	if err := fs.Parse(args[2:]); err != nil {
		return err
	}
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", net.JoinHostPort(*h, *p))
	if err != nil {
		return fmt.Errorf("failed to listen: %w", err)
	}
	store := storePath()
	st, err := loadStore(store)
	if err != nil {
		return err
	}
	s := goosetest.NewServe(nil, goosetest.WithServeSecret(secret), goosetest.WithServeScript(script),
		goosetest.WithServeListener(l), goosetest.WithServeRestore(st), goosetest.WithServeExtensions(extensions))
	fmt.Printf("goose serve (e2e stand-in) listening on %s, %d sessions from %s\n", s.URL, len(st.Sessions), store)
	<-ctx.Done()
	s.Close()
	return saveStore(store, s.Snapshot())
}

// storePath is where goose keeps its sessions: <GOOSE_PATH_ROOT>/data/sessions
// (sessions.db there; this stand-in writes JSON next to it).
func storePath() string {
	root := os.Getenv("GOOSE_PATH_ROOT")
	if root == "" {
		root = filepath.Join(os.Getenv("HOME"), ".local", "share", "goose")
		return filepath.Join(root, "sessions", "e2e-fake-sessions.json")
	}
	return filepath.Join(root, "data", "sessions", "e2e-fake-sessions.json")
}

func loadStore(path string) (goosetest.ServeStore, error) {
	var st goosetest.ServeStore
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("failed to read session store: %w", err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("failed to decode session store %s: %w", path, err)
	}
	return st, nil
}

// saveStore writes the sessions when goose stops (SIGTERM), through a
// temporary file so that a half-written store is never read.
func saveStore(path string, st goosetest.ServeStore) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("failed to create session store directory: %w", err)
	}
	if err := os.WriteFile(path+".tmp", b, 0o600); err != nil {
		return fmt.Errorf("failed to write session store: %w", err)
	}
	return os.Rename(path+".tmp", path)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
