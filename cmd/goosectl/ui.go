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

	"github.com/adk2goose/goose-operator/internal/webui"
	"github.com/adk2goose/goose-operator/sidecar/identity"
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
	name, namespace, kubeconfig, context string
	port                                 int
	noBrowser                            bool
	credential                           credentialOptions
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
	fs.StringVar(&o.credential.tokenFile, "token-file", "", "file holding the token to send, for users who may not read the agent's Secret")
	fs.StringVar(&o.credential.token, "token", "", "the token to send (visible in ps and shell history: prefer --token-file)")
	fs.StringVar(&o.credential.serviceAccount, "service-account", "", "mode kubernetes: the ServiceAccount (of the agent's namespace) to act as; goosectl requests its tokens for the agent's audience")
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
	case exclusive(o.credential.token, o.credential.tokenFile, o.credential.serviceAccount) > 1:
		return nil, errors.New("ui: --token, --token-file and --service-account are exclusive")
	}
	o.name = names[0]
	return o, nil
}

// exclusive counts the non-empty values.
func exclusive(values ...string) int {
	n := 0
	for _, v := range values {
		if v != "" {
			n++
		}
	}
	return n
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
	cred, err := agentCredentialFor(ctx, kc, cfg, tgt.Agent, o.credential)
	if err != nil {
		return fmt.Errorf("ui: %w", err)
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
	apps, me, err := probe(ctx, backend, cred)
	if err != nil {
		return fmt.Errorf("ui: %w (token from %s)", err, cred.From)
	}

	origin := "http://" + ln.Addr().String()
	h, err := webui.NewHandler(webui.Config{
		Origin: origin, Backend: backend, TokenFunc: cred.Token,
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
	if me.User != "" {
		// The UI names its ADK user in every path and run; in an identity
		// mode that must be the caller.
		uiURL += "?" + url.Values{"userId": {me.User}}.Encode()
		as = " as " + me.User
	}
	fmt.Fprintf(env.stdout, "ADK web UI for GooseAgent %s/%s (app %s)%s: %s\nPress Ctrl-C to stop.\n",
		ns, o.name, strings.Join(apps, ", "), as, uiURL)
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
// credential, so that a bad one fails here and not as a blank UI, and asks
// who the agent takes the caller to be.
func probe(ctx context.Context, backend *url.URL, cred *agentCredential) ([]string, identity.WhoAmI, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var apps []string
	if err := probeGet(ctx, backend, cred, "list-apps", &apps); err != nil {
		return nil, identity.WhoAmI{}, err
	}
	var me identity.WhoAmI
	if err := probeGet(ctx, backend, cred, strings.TrimPrefix(identity.WhoAmIPath, "/"), &me); err != nil {
		return nil, identity.WhoAmI{}, err
	}
	return apps, me, nil
}

// probeGet GETs path from the sidecar and decodes its JSON answer into out.
func probeGet(ctx context.Context, backend *url.URL, cred *agentCredential, path string, out any) error {
	token, err := cred.Token(ctx)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, backend.JoinPath(path).String(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := probeClient.Do(req)
	if err != nil {
		return fmt.Errorf("the agent does not answer through the port-forward: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		return errors.New("the agent rejected the token")
	case resp.StatusCode == http.StatusForbidden:
		return fmt.Errorf("the agent refused the caller: %s", strings.TrimSpace(string(body)))
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("the agent answered GET /%s with %s: %s", path, resp.Status, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("the agent answered GET /%s with %q, not what goosectl expects", path, body)
	}
	return nil
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
