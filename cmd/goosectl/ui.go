package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/rest"

	"github.com/adk2goose/goose-operator/internal/webui"
)

const uiUsage = `usage: goosectl ui NAME [-n NAMESPACE] [--kubeconfig FILE] [--context CTX] [--port 8000] [--no-browser] [--token-file FILE | --token TOKEN | --service-account SA]

Serves the ADK web UI on http://127.0.0.1:PORT/ui/ for the GooseAgent NAME: it
port-forwards to a ready pod behind the agent's Service and proxies the UI's API
calls there, adding the credential of the agent's auth mode: in mode token the
agent's token (read from its Secret unless given); in mode kubernetes a token of
the ServiceAccount --service-account names, for the agent's audience; in mode
oidc your kubeconfig user's token. The UI opens as the ADK user the agent says
you are (GET /whoami).
`

type uiOptions struct {
	agentFlags
	name      string
	port      int
	noBrowser bool
}

// parseUI accepts flags before and after NAME, as kubectl does.
func parseUI(args []string, stderr io.Writer) (*uiOptions, error) {
	o := &uiOptions{}
	fs := flag.NewFlagSet("goosectl ui", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, uiUsage+"\nflags:\n")
		fs.PrintDefaults()
	}
	o.register(fs)
	fs.IntVar(&o.port, "port", 8000, "local port of the UI on 127.0.0.1 (0 picks a free one)")
	fs.BoolVar(&o.noBrowser, "no-browser", false, "do not open a browser")
	names, err := parseNames(fs, args)
	if err != nil {
		return nil, err
	}
	switch {
	case len(names) == 0:
		fs.Usage()
		return nil, errors.New("ui: the GooseAgent NAME is required")
	case len(names) > 1:
		return nil, fmt.Errorf("ui: one GooseAgent NAME expected, got %q", names)
	case o.port < 0 || o.port > 65535:
		return nil, fmt.Errorf("ui: --port %d is out of range", o.port)
	}
	if err := o.check("ui"); err != nil {
		return nil, err
	}
	o.name = names[0]
	return o, nil
}

// uiEnv is what the commands need from the outside world, replaceable in
// tests.
type uiEnv struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	// notifyInterrupt delivers Ctrl-C (SIGINT) to the chat, which stops a
	// turn with it instead of ending, until stop is called.
	notifyInterrupt func() (interrupts <-chan os.Signal, stop func())
	// newForwarder makes the port-forwarder; production uses SPDY/WebSocket
	// through the API server, which needs a kubelet at the other end.
	newForwarder func(*rest.Config) (podForwarder, error)
	// openBrowser opens url best-effort; ctx ending stops an opener still
	// running.
	openBrowser func(ctx context.Context, url string) error
	// onServing, if set, gets the UI's base URL once it serves.
	onServing func(base string)
}

func defaultUIEnv() uiEnv {
	return uiEnv{
		stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr,
		notifyInterrupt: func() (<-chan os.Signal, func()) {
			ch := make(chan os.Signal, 1)
			signal.Notify(ch, os.Interrupt)
			return ch, func() { signal.Stop(ch) }
		},
		newForwarder: func(c *rest.Config) (podForwarder, error) { return newSPDYForwarder(c, os.Stderr) },
		openBrowser: func(ctx context.Context, u string) error {
			return openBrowser(ctx, u, os.Getenv)
		},
	}
}

// runUI is `goosectl ui`. It returns nil after ctx ends (Ctrl-C), and an
// error if setup fails or the port-forward is lost.
func runUI(ctx context.Context, args []string, env uiEnv) error {
	o, err := parseUI(args, env.stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	// Claim the UI port first: a busy port should fail before any cluster call.
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(o.port)))
	if err != nil {
		return fmt.Errorf("ui: cannot listen on 127.0.0.1:%d (pick another with --port, 0 for any): %w", o.port, err)
	}
	defer ln.Close()

	ep, err := forwardToAgent(ctx, "ui", o.name, &o.agentFlags, env)
	if err != nil {
		return err
	}
	defer ep.close()

	origin := "http://" + ln.Addr().String()
	h, err := webui.NewHandler(webui.Config{
		Origin: origin, Backend: ep.base, TokenFunc: ep.cred.Token,
		Logger: slog.New(slog.NewTextHandler(env.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	// No WriteTimeout: /run_sse streams for as long as the agent works.
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	uiURL := origin + webui.UIPath
	as := ""
	if ep.me.User != "" {
		// The UI names its ADK user in every path and run; in an identity
		// mode that must be the caller.
		uiURL += "?" + url.Values{"userId": {ep.me.User}}.Encode()
		as = " as " + ep.me.User
	}
	fmt.Fprintf(env.stdout, "ADK web UI for GooseAgent %s (app %s)%s: %s\nPress Ctrl-C to stop.\n",
		ep.agent, strings.Join(ep.apps, ", "), as, uiURL)
	if env.onServing != nil {
		env.onServing(origin)
	}
	if !o.noBrowser && env.openBrowser != nil {
		if err := env.openBrowser(ctx, uiURL); err != nil {
			fmt.Fprintf(env.stderr, "Could not open a browser (%v): open %s yourself.\n", err, uiURL)
		}
	}

	var result error
	select {
	case <-ctx.Done():
	case err := <-ep.lost:
		result = fmt.Errorf("ui: lost the port-forward to %s: %w; run goosectl ui again", ep.where, err)
	case err := <-served:
		result = fmt.Errorf("ui: serving failed: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		// Streams still open after the grace period are cut.
		_ = srv.Close()
	}
	return result
}

var errNoOpener = errors.New("no display or browser opener")

// openBrowser starts the platform's URL opener without waiting for it.
func openBrowser(ctx context.Context, u string, getenv func(string) string) error {
	var name string
	var args []string
	switch runtime.GOOS {
	case "darwin":
		name = "open"
	case "windows":
		name, args = "rundll32", []string{"url.dll,FileProtocolHandler"}
	default:
		if getenv("DISPLAY") == "" && getenv("WAYLAND_DISPLAY") == "" {
			return errNoOpener
		}
		name = "xdg-open"
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return errNoOpener
	}
	cmd := exec.CommandContext(ctx, path, append(args, u)...)
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() { _ = cmd.Wait() }() // reap it; openers exit once the browser has the URL
	return nil
}
