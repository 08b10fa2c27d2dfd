// Command adk-go-remoteagent is a sample: an ADK Go program that uses a
// GooseAgent in mode kubernetes as a sub-agent over A2A (adk-go's
// remoteagent), authenticating with a projected ServiceAccount token.
//
// Mount a token for the agent's audience into the client pod (see
// docs/identity.md) and run
//
//	adk-go-remoteagent -url http://helper.team.svc:8080 -token-file /var/run/agent/token -text "hello"
//
// The kubelet rewrites the token file before the token expires, so the
// program reads the file again for every request instead of once.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"google.golang.org/adk/agent"
	remoteagent "google.golang.org/adk/agent/remoteagent/v2"
	"google.golang.org/adk/runner"
	"google.golang.org/adk/session"
	"google.golang.org/genai"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "adk-go-remoteagent:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("adk-go-remoteagent", flag.ContinueOnError)
	agentURL := fs.String("url", "", "the GooseAgent's URL (status.endpoints.rest)")
	tokenFile := fs.String("token-file", "/var/run/agent/token", "the projected ServiceAccount token for the agent's audience")
	text := fs.String("text", "hello", "the message to send")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *agentURL == "" {
		return errors.New("-url is required")
	}
	hc := &http.Client{Transport: tokenFromFile{path: *tokenFile, base: http.DefaultTransport}}
	goose, err := remoteagent.NewA2A(remoteagent.A2AConfig{
		Name:              "goose",
		AgentCardProvider: sameOriginCard(*agentURL),
		ClientProvider:    remoteagent.NewA2AClientProvider(a2aclient.NewFactory(a2aclient.WithJSONRPCTransport(hc))),
	})
	if err != nil {
		return fmt.Errorf("failed to create the remote agent: %w", err)
	}
	sessions := session.InMemoryService()
	r, err := runner.New(runner.Config{AppName: "sample", Agent: goose, SessionService: sessions})
	if err != nil {
		return fmt.Errorf("failed to create the runner: %w", err)
	}
	if _, err := sessions.Create(ctx, &session.CreateRequest{AppName: "sample", UserID: "me", SessionID: "s1"}); err != nil {
		return fmt.Errorf("failed to create a session: %w", err)
	}
	for ev, err := range r.Run(ctx, "me", "s1", genai.NewContentFromText(*text, genai.RoleUser), agent.RunConfig{}) {
		if err != nil {
			return fmt.Errorf("failed to run: %w", err)
		}
		if ev.ErrorMessage != "" {
			return fmt.Errorf("the agent answered an error: %s", ev.ErrorMessage)
		}
		if ev.Partial || ev.Content == nil {
			continue
		}
		for _, p := range ev.Content.Parts {
			fmt.Fprint(out, p.Text)
		}
	}
	fmt.Fprintln(out)
	return nil
}

// tokenFromFile sends the token in path as `Authorization: Bearer`, read
// for each request so that a renewed token is used as soon as the kubelet
// writes it.
type tokenFromFile struct {
	path string
	base http.RoundTripper
}

func (t tokenFromFile) RoundTrip(r *http.Request) (*http.Response, error) {
	b, err := os.ReadFile(t.path)
	if err != nil {
		return nil, fmt.Errorf("failed to read the token file: %w", err)
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(b)))
	return t.base.RoundTrip(r)
}

// sameOriginCard resolves the agent card from the agent's URL and accepts
// it only if every interface it names is on that same origin, so a card
// cannot send the token elsewhere. adk-go's own NewAgentCardProvider also
// refuses plain http on any host but loopback, which an in-cluster Service
// is not.
func sameOriginCard(source string) remoteagent.AgentCardProvider {
	return func(ctx context.Context) (*a2a.AgentCard, error) {
		src, err := url.Parse(source)
		if err != nil {
			return nil, fmt.Errorf("failed to parse the agent URL: %w", err)
		}
		card, err := agentcard.DefaultResolver.Resolve(ctx, source)
		if err != nil {
			return nil, fmt.Errorf("failed to fetch the agent card: %w", err)
		}
		for _, iface := range card.SupportedInterfaces {
			u, err := url.Parse(iface.URL)
			if err != nil || u.Scheme != src.Scheme || !strings.EqualFold(u.Host, src.Host) {
				return nil, fmt.Errorf("agent card interface %q is not on %s", iface.URL, source)
			}
		}
		return card, nil
	}
}
