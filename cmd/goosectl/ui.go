package main

import (
	"context"
	"encoding/json"
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
	"runtime"
	"strconv"
	"strings"
	"time"

	_ "k8s.io/client-go/plugin/pkg/client/auth/oidc" // kubeconfigs with the oidc auth-provider, as kubectl supports
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/adk2goose/goose-operator/internal/secretfile"
	"github.com/adk2goose/goose-operator/internal/webui"
)

const uiUsage = `usage: goosectl ui NAME [-n NAMESPACE] [--kubeconfig FILE] [--context CTX] [--port 8000] [--no-browser] [--token-file FILE | --token TOKEN]

Serves the ADK web UI on http://127.0.0.1:PORT/ui/ for the GooseAgent NAME: it
port-forwards to a ready pod behind the agent's Service and proxies the UI's API
calls there, adding the agent's token (read from its Secret unless given).
`

type uiOptions struct {
	name, namespace, kubeconfig, context string
	port                                 int
	noBrowser                            bool
	token, tokenFile                     string
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
	fs.StringVar(&o.namespace, "n", "", "namespace of the GooseAgent (default: the kubeconfig context's namespace)")
	fs.StringVar(&o.namespace, "namespace", "", "same as -n")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&o.context, "context", "", "kubeconfig context (default: the current context)")
	fs.IntVar(&o.port, "port", 8000, "local port of the UI on 127.0.0.1 (0 picks a free one)")
	fs.BoolVar(&o.noBrowser, "no-browser", false, "do not open a browser")
	fs.StringVar(&o.tokenFile, "token-file", "", "file holding the agent's token, for users who may not read its Secret")
	fs.StringVar(&o.token, "token", "", "the agent's token (visible in ps and shell history: prefer --token-file)")
	var names []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		names, args = append(names, fs.Arg(0)), fs.Args()[1:]
	}
	switch {
	case len(names) == 0:
		fs.Usage()
		return nil, errors.New("ui: the GooseAgent NAME is required")
	case len(names) > 1:
		return nil, fmt.Errorf("ui: one GooseAgent NAME expected, got %q", names)
	case o.port < 0 || o.port > 65535:
		return nil, fmt.Errorf("ui: --port %d is out of range", o.port)
	case o.token != "" && o.tokenFile != "":
		return nil, errors.New("ui: --token and --token-file are exclusive")
	}
	o.name = names[0]
	return o, nil
}

// uiEnv is what runUI needs from the outside world, replaceable in tests.
type uiEnv struct {
	stdout, stderr io.Writer
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
		stdout: os.Stdout, stderr: os.Stderr,
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
	explicitToken := o.token
	if o.tokenFile != "" {
		if explicitToken, err = secretfile.Read(o.tokenFile, "token file"); err != nil {
			return err
		}
	}

	// Claim the UI port first: a busy port should fail before any cluster call.
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(o.port)))
	if err != nil {
		return fmt.Errorf("ui: cannot listen on 127.0.0.1:%d (pick another with --port, 0 for any): %w", o.port, err)
	}
	defer ln.Close()

	loader := clientcmd.NewDefaultClientConfigLoadingRules()
	loader.ExplicitPath = o.kubeconfig
	kcfg := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(loader, &clientcmd.ConfigOverrides{CurrentContext: o.context})
	cfg, err := kcfg.ClientConfig()
	if err != nil {
		return fmt.Errorf("ui: cannot load kubeconfig: %w", err)
	}
	ns := o.namespace
	if ns == "" {
		if ns, _, err = kcfg.Namespace(); err != nil {
			return fmt.Errorf("ui: cannot read the kubeconfig's namespace: %w", err)
		}
	}
	kc, err := newKubeClients(cfg)
	if err != nil {
		return err
	}
	tgt, err := kc.resolve(ctx, ns, o.name)
	if err != nil {
		return err
	}
	token, tokenFrom := explicitToken, "--token/--token-file"
	if token == "" {
		if token, tokenFrom, err = kc.readToken(ctx, tgt.Agent); err != nil {
			return err
		}
	}

	fwd, err := env.newForwarder(cfg)
	if err != nil {
		return err
	}
	fctx, stopForward := context.WithCancel(ctx)
	defer stopForward()
	local, lost, err := fwd.Forward(fctx, tgt.Pod, tgt.PodPort)
	if err != nil {
		return fmt.Errorf("ui: cannot port-forward to pod %s/%s: %w", tgt.Pod.Namespace, tgt.Pod.Name, err)
	}
	forwarding := true
	defer func() {
		stopForward()
		// Waiting means the forwarder has released its listener and streams.
		if forwarding {
			if err := <-lost; err != nil {
				fmt.Fprintf(env.stderr, "port-forward ended: %v\n", err)
			}
		}
	}()
	fmt.Fprintf(env.stdout, "Forwarding %s -> pod %s/%s port %d\n", local, tgt.Pod.Namespace, tgt.Pod.Name, tgt.PodPort)
	backend := &url.URL{Scheme: "http", Host: local}
	apps, err := probe(ctx, backend, token)
	if err != nil {
		return fmt.Errorf("ui: %w (token from %s)", err, tokenFrom)
	}

	origin := "http://" + ln.Addr().String()
	h, err := webui.NewHandler(webui.Config{
		Origin: origin, Backend: backend, Token: token,
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
	fmt.Fprintf(env.stdout, "ADK web UI for GooseAgent %s/%s (app %s): %s\nPress Ctrl-C to stop.\n",
		ns, o.name, strings.Join(apps, ", "), uiURL)
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
	case err := <-lost:
		forwarding = false
		result = fmt.Errorf("ui: lost the port-forward to pod %s/%s: %w; run goosectl ui again", tgt.Pod.Namespace, tgt.Pod.Name, err)
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

// probe checks that the sidecar answers through the forward and accepts the
// token, so that a bad token fails here and not as a blank UI.
func probe(ctx context.Context, backend *url.URL, token string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, backend.JoinPath("list-apps").String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := probeClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("the agent does not answer through the port-forward: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		return nil, errors.New("the agent rejected the token")
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("the agent answered GET /list-apps with %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	var apps []string
	if err := json.Unmarshal(body, &apps); err != nil {
		return nil, fmt.Errorf("the agent answered GET /list-apps with %q, not a list of apps", body)
	}
	return apps, nil
}

// probeClient keeps no idle connection: one would hold a stream of the
// port-forward open for nothing.
var probeClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

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
