package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	_ "k8s.io/client-go/plugin/pkg/client/auth/oidc" // kubeconfigs with the oidc auth-provider, as kubectl supports
	"k8s.io/client-go/tools/clientcmd"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/internal/secretfile"
)

// agentFlags are the flags of every command that talks to one agent.
type agentFlags struct {
	namespace, kubeconfig, context string
	token, tokenFile               string
}

func (f *agentFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.namespace, "n", "", "namespace of the GooseAgent (default: the kubeconfig context's namespace)")
	fs.StringVar(&f.namespace, "namespace", "", "same as -n")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&f.context, "context", "", "kubeconfig context (default: the current context)")
	fs.StringVar(&f.tokenFile, "token-file", "", "file holding the agent's token, for users who may not read its Secret")
	fs.StringVar(&f.token, "token", "", "the agent's token (visible in ps and shell history: prefer --token-file)")
}

func (f *agentFlags) check(cmd string) error {
	if f.token != "" && f.tokenFile != "" {
		return fmt.Errorf("%s: --token and --token-file are exclusive", cmd)
	}
	return nil
}

// explicitToken is the token given on the command line, if any.
func (f *agentFlags) explicitToken() (string, error) {
	if f.tokenFile != "" {
		return secretfile.Read(f.tokenFile, "token file")
	}
	return f.token, nil
}

// parseNames parses args into fs, accepting flags before and after the
// positional arguments, as kubectl does, and returns those.
func parseNames(fs *flag.FlagSet, args []string) ([]string, error) {
	var names []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return names, nil
		}
		names, args = append(names, fs.Arg(0)), fs.Args()[1:]
	}
}

// agentEndpoint is an agent's sidecar as a command reaches it: through a
// port-forward to a ready pod, or at a URL given by the user.
type agentEndpoint struct {
	base      *url.URL
	token     string
	tokenFrom string
	// apps are the sidecar's ADK apps, from GET /list-apps.
	apps []string
	// lost yields once if the port-forward ends by itself; it never does
	// without one.
	lost <-chan error
	// agent names the agent for people: namespace/name, or the URL;
	// where, the other end: a pod or the URL.
	agent, where string
	stop         func()
}

// authorize adds the agent's credential to a request to the sidecar.
func (e *agentEndpoint) authorize(h http.Header) { setBearer(h, e.token) }

func setBearer(h http.Header, token string) {
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
}

// close ends the port-forward and waits until it has released its
// listener and streams.
func (e *agentEndpoint) close() {
	if e.stop != nil {
		e.stop()
	}
}

// dialURL reaches the sidecar at a URL without Kubernetes.
func dialURL(ctx context.Context, cmd, raw string, f *agentFlags) (*agentEndpoint, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%s: --url %q is not an http:// or https:// URL", cmd, raw)
	}
	token, err := f.explicitToken()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cmd, err)
	}
	e := &agentEndpoint{base: u, token: token, tokenFrom: "--token/--token-file", agent: u.Redacted(), where: u.Redacted()}
	if token == "" {
		e.tokenFrom = "no token given"
	}
	if e.apps, err = probe(ctx, e.base, e.token); err != nil {
		return nil, fmt.Errorf("%s: %w (token from %s)", cmd, err, e.tokenFrom)
	}
	return e, nil
}

// forwardToAgent finds the GooseAgent name with the user's kubeconfig,
// takes the agent's credential and port-forwards to a ready pod of it.
func forwardToAgent(ctx context.Context, cmd, name string, f *agentFlags, env uiEnv) (_ *agentEndpoint, err error) {
	wrap := func(err error) error { return fmt.Errorf("%s: %w", cmd, err) }
	explicit, err := f.explicitToken()
	if err != nil {
		return nil, wrap(err)
	}
	loader := clientcmd.NewDefaultClientConfigLoadingRules()
	loader.ExplicitPath = f.kubeconfig
	kcfg := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(loader, &clientcmd.ConfigOverrides{CurrentContext: f.context})
	cfg, err := kcfg.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("%s: cannot load kubeconfig: %w", cmd, err)
	}
	ns := f.namespace
	if ns == "" {
		if ns, _, err = kcfg.Namespace(); err != nil {
			return nil, fmt.Errorf("%s: cannot read the kubeconfig's namespace: %w", cmd, err)
		}
	}
	kc, err := newKubeClients(cfg)
	if err != nil {
		return nil, wrap(err)
	}
	tgt, err := kc.resolve(ctx, ns, name)
	if err != nil {
		return nil, wrap(err)
	}
	token, tokenFrom, err := agentCredential(ctx, kc, tgt.Agent, explicit)
	if err != nil {
		return nil, wrap(err)
	}

	fwd, err := env.newForwarder(cfg)
	if err != nil {
		return nil, wrap(err)
	}
	fctx, stopForward := context.WithCancel(ctx)
	local, done, err := fwd.Forward(fctx, tgt.Pod, tgt.PodPort)
	if err != nil {
		stopForward()
		return nil, fmt.Errorf("%s: cannot port-forward to pod %s/%s: %w", cmd, tgt.Pod.Namespace, tgt.Pod.Name, err)
	}
	lost := make(chan error, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		err := <-done
		if fctx.Err() != nil {
			if err != nil {
				fmt.Fprintf(env.stderr, "port-forward ended: %v\n", err)
			}
			return
		}
		if err == nil {
			err = errors.New("the port-forward ended")
		}
		lost <- err
	}()
	e := &agentEndpoint{
		base: &url.URL{Scheme: "http", Host: local}, token: token, tokenFrom: tokenFrom, lost: lost,
		agent: ns + "/" + name, where: fmt.Sprintf("pod %s/%s", tgt.Pod.Namespace, tgt.Pod.Name),
		stop: func() { stopForward(); <-finished },
	}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	fmt.Fprintf(env.stdout, "Forwarding %s -> pod %s/%s port %d\n", local, tgt.Pod.Namespace, tgt.Pod.Name, tgt.PodPort)
	if e.apps, err = probe(ctx, e.base, e.token); err != nil {
		return nil, fmt.Errorf("%s: %w (token from %s)", cmd, err, tokenFrom)
	}
	return e, nil
}

// agentCredential is the one place that decides what goosectl presents to
// the agent: the token given on the command line, else the agent's own
// token from its Secret.
func agentCredential(ctx context.Context, kc *kubeClients, a *agentsv1alpha1.GooseAgent, explicit string) (token, from string, err error) {
	if explicit != "" {
		return explicit, "--token/--token-file", nil
	}
	return kc.readToken(ctx, a)
}

// probe checks that the sidecar answers and accepts the credential, so that
// a bad token fails here and not as a blank UI or a chat that cannot start.
// It returns the sidecar's apps.
func probe(ctx context.Context, backend *url.URL, token string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, backend.JoinPath("list-apps").String(), nil)
	if err != nil {
		return nil, err
	}
	setBearer(req.Header, token)
	resp, err := probeClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("the agent does not answer at %s: %w", backend.Redacted(), err)
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
