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

	"github.com/adk2goose/goose-operator/internal/secretfile"
	"github.com/adk2goose/goose-operator/sidecar/identity"
)

// agentFlags are the flags of every command that talks to one agent.
type agentFlags struct {
	namespace, kubeconfig, context string
	credential                     credentialOptions
}

func (f *agentFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.namespace, "n", "", "namespace of the GooseAgent (default: the kubeconfig context's namespace)")
	fs.StringVar(&f.namespace, "namespace", "", "same as -n")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&f.context, "context", "", "kubeconfig context (default: the current context)")
	fs.StringVar(&f.credential.tokenFile, "token-file", "", "file holding the token to send, for users who may not read the agent's Secret")
	fs.StringVar(&f.credential.token, "token", "", "the token to send (visible in ps and shell history: prefer --token-file)")
	fs.StringVar(&f.credential.serviceAccount, "service-account", "", "mode kubernetes: the ServiceAccount (of the agent's namespace) to act as; goosectl requests its tokens for the agent's audience")
}

func (f *agentFlags) check(cmd string) error {
	if exclusive(f.credential.token, f.credential.tokenFile, f.credential.serviceAccount) > 1 {
		return fmt.Errorf("%s: --token, --token-file and --service-account are exclusive", cmd)
	}
	return nil
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
	base *url.URL
	cred *agentCredential
	// apps are the sidecar's ADK apps, from GET /list-apps; me, who the
	// agent takes the caller to be (GET /whoami).
	apps []string
	me   identity.WhoAmI
	// lost yields once if the port-forward ends by itself; it never does
	// without one.
	lost <-chan error
	// agent names the agent for people: namespace/name, or the URL;
	// where, the other end: a pod or the URL.
	agent, where string
	stop         func()
}

// authorize adds the agent's credential to a request to the sidecar.
func (e *agentEndpoint) authorize(ctx context.Context, h http.Header) error {
	token, err := e.cred.Token(ctx)
	if err != nil {
		return err
	}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	return nil
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
	var cred *agentCredential
	switch c := f.credential; {
	case c.serviceAccount != "":
		return nil, fmt.Errorf("%s: --service-account needs a GooseAgent NAME, not --url: pass --token-file", cmd)
	case c.tokenFile != "":
		t, err := secretfile.Read(c.tokenFile, "token file")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", cmd, err)
		}
		cred = staticCredential("--token-file "+c.tokenFile, t)
	case c.token != "":
		cred = staticCredential("--token", c.token)
	default:
		cred = staticCredential("no token given", "")
	}
	e := &agentEndpoint{base: u, cred: cred, agent: u.Redacted(), where: u.Redacted()}
	if e.apps, e.me, err = probe(ctx, e.base, e.cred); err != nil {
		return nil, fmt.Errorf("%s: %w (token from %s)", cmd, err, cred.From)
	}
	return e, nil
}

// forwardToAgent finds the GooseAgent name with the user's kubeconfig,
// takes the agent's credential and port-forwards to a ready pod of it.
func forwardToAgent(ctx context.Context, cmd, name string, f *agentFlags, env uiEnv) (_ *agentEndpoint, err error) {
	wrap := func(err error) error { return fmt.Errorf("%s: %w", cmd, err) }
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
	cred, err := agentCredentialFor(ctx, kc, cfg, tgt.Agent, f.credential)
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
		base: &url.URL{Scheme: "http", Host: local}, cred: cred, lost: lost,
		agent: ns + "/" + name, where: fmt.Sprintf("pod %s/%s", tgt.Pod.Namespace, tgt.Pod.Name),
		stop: func() { stopForward(); <-finished },
	}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	fmt.Fprintf(env.stdout, "Forwarding %s -> pod %s/%s port %d\n", local, tgt.Pod.Namespace, tgt.Pod.Name, tgt.PodPort)
	if e.apps, e.me, err = probe(ctx, e.base, cred); err != nil {
		return nil, fmt.Errorf("%s: %w (token from %s)", cmd, err, cred.From)
	}
	return e, nil
}

// probe checks that the sidecar answers and accepts the credential, so
// that a bad one fails here and not as a blank UI or a chat that cannot
// start, and asks who the agent takes the caller to be.
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
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := probeClient.Do(req)
	if err != nil {
		return fmt.Errorf("the agent does not answer at %s: %w", backend.Redacted(), err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		// Its reason only lists where a token may be sent.
		return errors.New("the agent rejected the token")
	case resp.StatusCode == http.StatusForbidden:
		return fmt.Errorf("the agent refused the caller: %s", agentReason(body))
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("the agent answered GET /%s with %s: %s", path, resp.Status, agentReason(body))
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("the agent answered GET /%s with %q, not what goosectl expects", path, body)
	}
	return nil
}

// agentReason is the reason of a sidecar's JSON error body
// ({"error": ..., "detail": ...}), or the body itself when it is not one.
func agentReason(body []byte) string {
	var e struct{ Error, Detail string }
	if json.Unmarshal(body, &e) == nil && e.Detail != "" {
		return e.Detail
	}
	return strings.TrimSpace(string(body))
}

// probeClient keeps no idle connection: one would hold a stream of the
// port-forward open for nothing.
var probeClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
