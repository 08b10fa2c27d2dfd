// Command client is the e2e suite's chat client, run inside a client pod so
// that its requests reach an agent through the cluster's Service routing and
// DNS as an in-cluster ADK client's would. It prints one JSON object.
//
// Every command takes -token T, or -token-file F: a file read again for
// each request, as a projected ServiceAccount token the kubelet renews.
//
//	client rest -url URL -token T -app APP -user U -session S -text TEXT
//	    one turn over the ADK REST API (POST /run_sse), creating the session
//	    first when -create is given
//	client a2a -url URL -token T -text TEXT [-stock-card-provider]
//	    one turn over A2A with adk-go's remoteagent (the agent as a sub-agent);
//	    the agent card comes from inClusterCardProvider unless
//	    -stock-card-provider asks for remoteagent.NewAgentCardProvider
//	client get -url URL [-token T] [-insecure]
//	    a GET whose body is printed as is (a pod's /metrics, a session)
//	client live -url URL -token T -app APP -user U -session S -text TEXT [-create]
//	    a conversation on one /run_live socket: TEXT, then "slow 30"
//	    stopped with {"activityStart":{}} after its first event, then
//	    "again: TEXT"; prints each turn's streamed text and error code
//	client create-at-once -urls URL,URL... -token T -app APP -user U -session PREFIX -n N
//	    creates sessions PREFIX-0 … PREFIX-(N-1), each sent to every URL at
//	    once, and prints the status codes each id got
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"github.com/adk2goose/goose-operator/internal/bearer"
	"google.golang.org/adk/agent"
	remoteagent "google.golang.org/adk/agent/remoteagent/v2"
	"google.golang.org/adk/runner"
	"google.golang.org/adk/session"
	"google.golang.org/genai"
)

// Result is what one turn returned.
type Result struct {
	Text             string     `json:"text"`
	Tools            []ToolCall `json:"tools,omitempty"`
	PromptTokens     int32      `json:"promptTokens"`
	CandidatesTokens int32      `json:"candidatesTokens"`
	TotalTokens      int32      `json:"totalTokens"`
}

// ToolCall is one tool the agent ran in the turn: its function call and
// the output or error of its function response (REST only).
type ToolCall struct {
	ID     string         `json:"id"`
	Name   string         `json:"name"`
	Args   map[string]any `json:"args,omitempty"`
	Output string         `json:"output,omitempty"`
	Error  string         `json:"error,omitempty"`
}

func main() {
	if err := runAndPrint(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(1)
	}
}

// runAndPrint runs the command and prints its result as JSON.
func runAndPrint(args []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := run(ctx, args)
	if err != nil || res == nil {
		return err
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		return fmt.Errorf("failed to print result: %w", err)
	}
	return nil
}

func run(ctx context.Context, args []string) (*Result, error) {
	if len(args) == 0 {
		return nil, errors.New("usage: client rest|a2a|live|get|create-at-once|turns-at-once [flags]")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	url := fs.String("url", "", "the agent's base URL, e.g. http://NAME.NS.svc:8080")
	token := fs.String("token", "", "the agent's bearer token")
	tokenFile := fs.String("token-file", "", "a file holding the bearer token, read for each request (a projected ServiceAccount token)")
	text := fs.String("text", "hello", "the user's message")
	app := fs.String("app", "", "ADK app name (rest)")
	user := fs.String("user", "e2e", "ADK user id (rest)")
	sid := fs.String("session", "", "ADK session id (rest)")
	create := fs.Bool("create", false, "create the session first (rest)")
	stock := fs.Bool("stock-card-provider", false, "resolve the agent card with remoteagent.NewAgentCardProvider (a2a)")
	insecure := fs.Bool("insecure", false, "skip TLS verification (get; the manager's self-signed metrics endpoint)")
	urls := fs.String("urls", "", "comma-separated base URLs, each sent every create (create-at-once)")
	n := fs.Int("n", 10, "sessions to create (create-at-once) or turns to run (turns-at-once)")
	if err := fs.Parse(args[1:]); err != nil {
		return nil, err
	}
	base := http.DefaultTransport.(*http.Transport).Clone()
	// In the cluster a connection opens at once or not at all (a Service
	// rule still naming a replaced pod); fail fast so the suite retries.
	base.DialContext = (&net.Dialer{Timeout: 5 * time.Second}).DialContext
	base.MaxIdleConnsPerHost = max(*n, 2) // create-at-once keeps n connections to each URL
	if *insecure {
		base.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // e2e only: a self-signed in-cluster endpoint
	}
	var transport http.RoundTripper = bearer.Transport{Token: *token, Base: base}
	if *tokenFile != "" {
		transport = fileBearer{path: *tokenFile, base: base}
	}
	hc := &http.Client{Transport: transport}
	switch args[0] {
	case "get":
		return nil, get(ctx, hc, *url)
	case "create-at-once":
		codes, err := createAtOnce(ctx, hc, strings.Split(*urls, ","), *app, *user, *sid, *n)
		if err != nil {
			return nil, err
		}
		return nil, json.NewEncoder(os.Stdout).Encode(codes)
	case "turns-at-once":
		return nil, json.NewEncoder(os.Stdout).Encode(turnsAtOnce(ctx, hc, *url, *app, *user, *sid, *text, *n))
	case "rest":
		if *create {
			if err := post(ctx, hc, *url+"/apps/"+*app+"/users/"+*user+"/sessions/"+*sid, nil, io.Discard); err != nil {
				return nil, fmt.Errorf("failed to create session: %w", err)
			}
		}
		return runREST(ctx, hc, *url, *app, *user, *sid, *text)
	case "live":
		if *create {
			if err := post(ctx, hc, *url+"/apps/"+*app+"/users/"+*user+"/sessions/"+*sid, nil, io.Discard); err != nil {
				return nil, fmt.Errorf("failed to create session: %w", err)
			}
		}
		turns, err := runLive(ctx, *url, *token, *app, *user, *sid, *text)
		if err != nil {
			return nil, err
		}
		return nil, json.NewEncoder(os.Stdout).Encode(turns)
	case "a2a":
		cards := InClusterCardProvider(*url)
		if *stock {
			cards = remoteagent.NewAgentCardProvider(*url)
		}
		return runA2A(ctx, hc, cards, *text)
	}
	return nil, fmt.Errorf("unknown command %q", args[0])
}

// fileBearer sends the token in path, read for each request: the kubelet
// replaces a projected token before it expires.
type fileBearer struct {
	path string
	base http.RoundTripper
}

func (f fileBearer) RoundTrip(r *http.Request) (*http.Response, error) {
	b, err := os.ReadFile(f.path)
	if err != nil {
		return nil, fmt.Errorf("failed to read the token file: %w", err)
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(b)))
	return f.base.RoundTrip(r)
}

// createAtOnce creates sessions prefix-0 … prefix-(n-1), sending every
// create to every one of urls in the same moment (over connections opened
// first, so that no dial staggers them; hc keeps n idle per host), and
// returns the status codes each id got, in no order.
func createAtOnce(ctx context.Context, hc *http.Client, urls []string, app, user, prefix string, n int) (map[string][]int, error) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed error
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		failed = errors.Join(failed, err)
	}
	// n connections to each URL, left idle for the creates.
	for _, u := range urls {
		for range n {
			wg.Go(func() {
				if err := exchange(ctx, hc, http.MethodGet, u+"/healthz", nil, io.Discard); err != nil {
					fail(err)
				}
			})
		}
	}
	wg.Wait()
	if failed != nil {
		return nil, fmt.Errorf("failed to open connections: %w", failed)
	}
	type create struct {
		id  string
		req *http.Request
	}
	var creates []create
	for i := range n {
		id := fmt.Sprint(prefix, "-", i)
		for _, u := range urls {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, u+"/apps/"+app+"/users/"+user+"/sessions/"+id, strings.NewReader("{}"))
			if err != nil {
				return nil, fmt.Errorf("failed to build the create of session %s: %w", id, err)
			}
			req.Header.Set("Content-Type", "application/json")
			creates = append(creates, create{id, req})
		}
	}
	codes := map[string][]int{}
	start := make(chan struct{})
	for _, c := range creates {
		wg.Go(func() {
			<-start
			resp, err := hc.Do(c.req)
			if err != nil {
				fail(fmt.Errorf("failed to create session %s: %w", c.id, err))
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			mu.Lock()
			defer mu.Unlock()
			codes[c.id] = append(codes[c.id], resp.StatusCode)
		})
	}
	close(start)
	wg.Wait()
	if failed != nil {
		return nil, failed
	}
	return codes, nil
}

// Turns is what turns-at-once prints: how many of the turns got their echo,
// why the others did not, and each answered turn's time from the common
// start to its whole answer, sorted.
type Turns struct {
	Answered int      `json:"answered"`
	Failed   []string `json:"failed,omitempty"`
	AnswerMS []int64  `json:"answerMs"`
}

// turnsAtOnce runs n turns at the same moment, each in its own new session
// prefix-i with the text "text i", and checks each answer is the fake goose's
// echo of its own text.
func turnsAtOnce(ctx context.Context, hc *http.Client, url, app, user, prefix, text string, n int) Turns {
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		out Turns
	)
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			sid, msg := fmt.Sprint(prefix, "-", i), fmt.Sprint(text, " ", i)
			err := post(ctx, hc, url+"/apps/"+app+"/users/"+user+"/sessions/"+sid, nil, io.Discard)
			var res *Result
			if err == nil {
				res, err = runREST(ctx, hc, url, app, user, sid, msg)
			}
			if err == nil && !strings.Contains(res.Text, "echo: "+msg) {
				err = fmt.Errorf("answer %q is not the echo of %q", res.Text, msg)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				out.Failed = append(out.Failed, sid+": "+err.Error())
				return
			}
			out.Answered++
			out.AnswerMS = append(out.AnswerMS, time.Since(start).Milliseconds())
		})
	}
	wg.Wait()
	slices.Sort(out.AnswerMS)
	return out
}

// post sends body as JSON ({} for nil) and copies a 200 answer to out.
func post(ctx context.Context, hc *http.Client, url string, body any, out io.Writer) error {
	j := []byte("{}")
	if body != nil {
		var err error
		if j, err = json.Marshal(body); err != nil {
			return err
		}
	}
	return exchange(ctx, hc, http.MethodPost, url, bytes.NewReader(j), out)
}

func get(ctx context.Context, hc *http.Client, url string) error {
	return exchange(ctx, hc, http.MethodGet, url, nil, os.Stdout)
}

// exchange sends one request and copies a 200 answer to out; any other
// status is an error carrying the body.
func exchange(ctx context.Context, hc *http.Client, method, url string, body io.Reader, out io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s %s: HTTP %d: %s", method, url, resp.StatusCode, b)
	}
	_, err = io.Copy(out, resp.Body)
	return err
}

// runREST plays one turn over POST /run_sse and keeps the final event's text
// and usage.
func runREST(ctx context.Context, hc *http.Client, url, app, user, sid, text string) (*Result, error) {
	var buf bytes.Buffer
	err := post(ctx, hc, url+"/run_sse", map[string]any{
		"appName": app, "userId": user, "sessionId": sid, "streaming": true,
		"newMessage": map[string]any{"role": "user", "parts": []any{map[string]any{"text": text}}},
	}, &buf)
	if err != nil {
		return nil, fmt.Errorf("failed to run: %w", err)
	}
	res := &Result{}
	sc := bufio.NewScanner(&buf)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	final := false
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev session.Event
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return nil, fmt.Errorf("failed to decode event %s: %w", data, err)
		}
		// adkrest's own error frame (a run that failed, a stream ended by a drain).
		var frame struct {
			Error string `json:"error"`
		}
		if json.Unmarshal([]byte(data), &frame) == nil && frame.Error != "" {
			return nil, fmt.Errorf("the stream ended with an error: %s", frame.Error)
		}
		if ev.ErrorMessage != "" {
			return nil, fmt.Errorf("the agent answered an error: %s", ev.ErrorMessage)
		}
		if ev.Partial {
			continue
		}
		final = true
		res.add(&ev)
	}
	if !final {
		return nil, errors.New("the stream ended without a final event")
	}
	return res, nil
}

func (r *Result) add(ev *session.Event) {
	if ev.Content != nil {
		for _, p := range ev.Content.Parts {
			switch {
			case p.FunctionCall != nil:
				r.Tools = append(r.Tools, ToolCall{ID: p.FunctionCall.ID, Name: p.FunctionCall.Name, Args: p.FunctionCall.Args})
			case p.FunctionResponse != nil:
				r.toolResponse(p.FunctionResponse)
			case !p.Thought:
				r.Text += p.Text
			}
		}
	}
	if u := ev.UsageMetadata; u != nil {
		r.PromptTokens, r.CandidatesTokens, r.TotalTokens = u.PromptTokenCount, u.CandidatesTokenCount, u.TotalTokenCount
	}
}

// toolResponse records a function response on its call: the sidecar puts
// goose's tool result under "output", or "error" for a failed tool.
func (r *Result) toolResponse(fr *genai.FunctionResponse) {
	for i := range r.Tools {
		if r.Tools[i].ID == fr.ID {
			r.Tools[i].Output, _ = fr.Response["output"].(string)
			r.Tools[i].Error, _ = fr.Response["error"].(string)
			return
		}
	}
}

// runA2A plays one turn with adk-go's A2A remote agent, as an ADK program
// using the GooseAgent as a sub-agent does.
func runA2A(ctx context.Context, hc *http.Client, cards remoteagent.AgentCardProvider, text string) (*Result, error) {
	remote, err := remoteagent.NewA2A(remoteagent.A2AConfig{
		Name:              "goose_remote",
		AgentCardProvider: cards,
		ClientProvider:    remoteagent.NewA2AClientProvider(a2aclient.NewFactory(a2aclient.WithJSONRPCTransport(hc))),
	})
	if err != nil {
		return nil, fmt.Errorf("failed to create A2A client: %w", err)
	}
	sessions := session.InMemoryService()
	r, err := runner.New(runner.Config{AppName: "e2e_client", Agent: remote, SessionService: sessions})
	if err != nil {
		return nil, fmt.Errorf("failed to create runner: %w", err)
	}
	if _, err := sessions.Create(ctx, &session.CreateRequest{AppName: "e2e_client", UserID: "e2e", SessionID: "a2a"}); err != nil {
		return nil, fmt.Errorf("failed to create client session: %w", err)
	}
	res := &Result{}
	for ev, err := range r.Run(ctx, "e2e", "a2a", genai.NewContentFromText(text, genai.RoleUser), agent.RunConfig{}) {
		if err != nil {
			return nil, fmt.Errorf("failed to run over A2A: %w", err)
		}
		if ev.ErrorMessage != "" {
			return nil, fmt.Errorf("the agent answered an error over A2A: %s", ev.ErrorMessage)
		}
		if !ev.Partial {
			res.add(ev)
		}
	}
	if res.Text == "" {
		return nil, errors.New("the A2A reply carried no text")
	}
	return res, nil
}

// InClusterCardProvider resolves a GooseAgent's agent card from its in-cluster
// URL (status.endpoints.rest). adk-go's remoteagent.NewAgentCardProvider
// (v1.7.0, remoteagent/v2 validateCardInterfaceOrigins) refuses a card whose
// interfaces are plain http on anything but a loopback host, and the sidecar
// serves plain HTTP inside the cluster. This provider keeps adk-go's other
// rule, that every interface shares the origin the card was asked from, so a
// card cannot send the bearer token elsewhere. docs/using.md "ADK Go over A2A"
// shows the same function.
func InClusterCardProvider(source string) remoteagent.AgentCardProvider {
	return func(ctx context.Context) (*a2a.AgentCard, error) {
		src, err := neturl.Parse(source)
		if err != nil {
			return nil, fmt.Errorf("failed to parse agent URL: %w", err)
		}
		card, err := agentcard.DefaultResolver.Resolve(ctx, source)
		if err != nil {
			return nil, fmt.Errorf("failed to fetch agent card: %w", err)
		}
		for _, iface := range card.SupportedInterfaces {
			u, err := neturl.Parse(iface.URL)
			if err != nil || u.Scheme != src.Scheme || !strings.EqualFold(u.Host, src.Host) {
				return nil, fmt.Errorf("agent card interface %q is not on %s", iface.URL, source)
			}
		}
		return card, nil
	}
}
