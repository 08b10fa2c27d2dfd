// Command goose is the e2e cluster's stand-in for the official goose image's
// binary: the fake servers of sidecar/goose/goosetest behind the command lines
// the operator runs.
//
//	goose serve --host H --port P    ACP (`goose serve`, the default flavor)
//	goosed agent                     REST (`goosed`, flavor goosed; GOOSE_HOST, GOOSE_PORT)
//
// Like goose it reads GOOSE_SERVER__SECRET_KEY and refuses to serve without
// it (goose 1.41+), and stops on SIGTERM. Replies echo the user's text and
// name the pod and the goose session that answered, so tests see where a turn
// ran.
package main

import (
	"context"
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
	host, _ := os.Hostname()
	script := func(sessionID, text string) goosetest.Reply {
		r := goosetest.Echo(sessionID, text)
		r.Steps = append(r.Steps, goosetest.Step{Text: fmt.Sprintf(" [pod=%s goose-session=%s]", host, sessionID)})
		return r
	}

	if filepath.Base(args[0]) == "goosed" {
		if len(args) < 2 || args[1] != "agent" {
			return errors.New("usage: goosed agent")
		}
		l, err := net.Listen("tcp", net.JoinHostPort(envOr("GOOSE_HOST", "127.0.0.1"), envOr("GOOSE_PORT", "3000")))
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
	l, err := net.Listen("tcp", net.JoinHostPort(*h, *p))
	if err != nil {
		return fmt.Errorf("failed to listen: %w", err)
	}
	s := goosetest.NewServe(nil, goosetest.WithServeSecret(secret), goosetest.WithServeScript(script), goosetest.WithServeListener(l))
	fmt.Println("goose serve (e2e stand-in) listening on", s.URL)
	<-ctx.Done()
	s.Close()
	return nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
