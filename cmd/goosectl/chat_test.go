package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"iter"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"

	"google.golang.org/adk/agent"
	"google.golang.org/adk/server/adkrest"
	"google.golang.org/adk/session"
	"google.golang.org/adk/tool/toolconfirmation"
	"google.golang.org/genai"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/internal/testing/poll"
	"github.com/adk2goose/goose-operator/internal/testing/syncbuf"
	"github.com/adk2goose/goose-operator/internal/testing/testenv"
	"github.com/adk2goose/goose-operator/sidecar/gooseagent"
	"github.com/adk2goose/goose-operator/sidecar/gooseagent/confirmation"
	"github.com/adk2goose/goose-operator/sidecar/identity"
)

// liveGoose is a live ADK agent (adk-go's runner finds its RunLive) that
// answers as the sidecar's goose agent does on /run_live (issue 43): a text
// message starts a turn that streams partial text events and ends with one
// non-partial event with TurnComplete; messages sent during a turn wait for
// it; a tool approval ends the turn with an adk_request_confirmation call
// shaped as gooseagent's, answered by a functionResponse read with
// confirmation.Parse; {"activityStart":{}} stops the running turn
// with GOOSE_CANCELLED and keeps the socket. What each message does:
//
//   - "please run a tool": a shell call, its approval, then its result and
//     a reply if allowed, a reply without a result if denied;
//   - "something slow": a partial event, then nothing until activityStart;
//   - "hold": a partial event, then the rest once release is closed;
//   - "fail": the iterator fails, so adkrest closes the socket with 1011;
//   - anything else: "You said: TEXT. I am goose." in two partial events.
type liveGoose struct {
	agent.Agent
	release chan struct{}

	mu      sync.Mutex
	answers []*genai.FunctionResponse
	ended   int // live sessions whose iterator returned
}

func newLiveGoose(t *testing.T) *liveGoose {
	t.Helper()
	inner, err := agent.New(agent.Config{Name: "goose", Description: "goose, live",
		Run: func(agent.InvocationContext) iter.Seq2[*session.Event, error] {
			return func(yield func(*session.Event, error) bool) { yield(nil, errors.New("live only")) }
		}})
	if err != nil {
		t.Fatal(err)
	}
	return &liveGoose{Agent: inner, release: make(chan struct{})}
}

func (g *liveGoose) recorded() ([]*genai.FunctionResponse, int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]*genai.FunctionResponse(nil), g.answers...), g.ended
}

// liveGooseSession is the agent.LiveSession adk-go's handler sends to.
type liveGooseSession struct {
	reqs chan agent.LiveRequest
	done chan struct{}
	once sync.Once
}

func (s *liveGooseSession) Send(r agent.LiveRequest) error {
	select {
	case s.reqs <- r:
		return nil
	case <-s.done:
		return errors.New("live session closed")
	default:
		return errors.New("too many messages waiting")
	}
}

func (s *liveGooseSession) Close() error {
	s.once.Do(func() { close(s.done) })
	return nil
}

func (g *liveGoose) RunLive(ic agent.InvocationContext) (agent.LiveSession, iter.Seq2[*session.Event, error], error) {
	s := &liveGooseSession{reqs: make(chan agent.LiveRequest, 8), done: make(chan struct{})}
	return s, func(yield func(*session.Event, error) bool) {
		defer func() {
			g.mu.Lock()
			g.ended++
			g.mu.Unlock()
		}()
		var waiting []agent.LiveRequest // messages that came during a turn
		next := func() (agent.LiveRequest, bool) {
			if len(waiting) > 0 {
				r := waiting[0]
				waiting = waiting[1:]
				return r, true
			}
			select {
			case r := <-s.reqs:
				return r, true
			case <-s.done:
			case <-ic.Done():
			}
			return agent.LiveRequest{}, false
		}
		// await waits for an activityStart ("stop") or until closing
		// ("released"); other messages wait their turn.
		await := func(until <-chan struct{}) string {
			for {
				select {
				case r := <-s.reqs:
					if _, ok := r.RealtimeInput.(*genai.ActivityStart); ok {
						return "stop"
					}
					waiting = append(waiting, r)
				case <-until:
					return "released"
				case <-s.done:
					return "gone"
				case <-ic.Done():
					return "gone"
				}
			}
		}
		event := func(partial bool, parts ...*genai.Part) *session.Event {
			e := session.NewEventWithContext(ic, ic.InvocationID())
			e.Author = g.Name()
			e.Content = &genai.Content{Role: genai.RoleModel, Parts: parts}
			e.Partial = partial
			return e
		}
		final := func(text string) *session.Event {
			e := event(false, genai.NewPartFromText(text))
			e.TurnComplete = true
			return e
		}
		reply := func(chunks ...string) bool {
			for _, c := range chunks {
				if !yield(event(true, genai.NewPartFromText(c)), nil) {
					return false
				}
			}
			return yield(final(strings.Join(chunks, "")), nil)
		}
		var pendingID string
		for {
			r, ok := next()
			if !ok {
				return
			}
			if r.Content == nil {
				continue // an activityStart between turns: nothing runs
			}
			if fr := r.Content.Parts[0].FunctionResponse; fr != nil {
				g.mu.Lock()
				g.answers = append(g.answers, fr)
				g.mu.Unlock()
				allow, err := confirmation.Parse(fr.Response)
				switch {
				case fr.ID != pendingID || fr.Name != toolconfirmation.FunctionCallName || err != nil:
					e := final("")
					e.ErrorCode, e.ErrorMessage = gooseagent.ErrorCodeConfirmationNotPending, "no such confirmation"
					if !yield(e, nil) {
						return
					}
				case allow:
					res := event(false, &genai.Part{FunctionResponse: &genai.FunctionResponse{ID: "call-1", Name: "shell",
						Response: map[string]any{"output": "README.md go.mod main.go"}}})
					res.Content.Role = genai.RoleUser
					if !yield(res, nil) || !reply("There are three files: ", "README.md, go.mod and main.go.") {
						return
					}
				default:
					if !reply("I did not run it.") {
						return
					}
				}
				pendingID = ""
				continue
			}
			text := r.Content.Parts[0].Text
			switch text {
			case "please run a tool":
				pendingID = "adk-confirm-1"
				call := event(false, genai.NewPartFromText("I will list the files first."),
					&genai.Part{FunctionCall: &genai.FunctionCall{ID: "call-1", Name: "shell", Args: map[string]any{"command": "ls"}}})
				ask := final("")
				ask.Content.Parts = []*genai.Part{{FunctionCall: &genai.FunctionCall{ID: pendingID, Name: toolconfirmation.FunctionCallName,
					Args: map[string]any{
						"originalFunctionCall": map[string]any{"id": "call-1", "name": "shell", "args": map[string]any{"command": "ls"}},
						"toolConfirmation": map[string]any{"confirmed": false,
							"hint": "goose wants to use shell:\n  command: ls\nReply yes to allow it this once, or no to refuse."},
					}}}}
				ask.LongRunningToolIDs = []string{pendingID}
				if !yield(event(true, genai.NewPartFromText("I will list the files first.")), nil) || !yield(call, nil) || !yield(ask, nil) {
					return
				}
			case "something slow", "hold":
				const thinking = "Let me think about that for a long while."
				if !yield(event(true, genai.NewPartFromText(thinking)), nil) {
					return
				}
				var until <-chan struct{}
				if text == "hold" {
					until = g.release
				}
				switch await(until) {
				case "stop":
					e := final(thinking)
					e.ErrorCode, e.ErrorMessage = gooseagent.ErrorCodeCancelled, "turn stopped by the client (activityStart): context canceled"
					if !yield(e, nil) {
						return
					}
				case "released":
					if !yield(event(true, genai.NewPartFromText(" Done.")), nil) || !yield(final(thinking+" Done."), nil) {
						return
					}
				default:
					return
				}
			case "fail":
				yield(nil, errors.New("goose is gone"))
				return
			default:
				if !reply("You said: "+text+".", " I am goose.") {
					return
				}
			}
		}
	}, nil
}

// startLiveAgent serves adk-go's own REST server (adkrest, with its
// /run_live handler) for g over loopback, behind a bearer token check.
func startLiveAgent(t *testing.T, g *liveGoose, token string) string {
	t.Helper()
	rest, err := adkrest.NewServer(adkrest.ServerConfig{
		SessionService: session.InMemoryService(),
		AgentLoader:    agent.NewSingleLoader(g),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, `{"error":"unauthorized"}`, http.StatusUnauthorized)
			return
		}
		if r.URL.Path == identity.WhoAmIPath {
			// As the sidecar in mode token: the client names the user.
			_, _ = w.Write([]byte(`{"verified":false,"admin":false}`))
			return
		}
		rest.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// chatRun is one `goosectl chat` running in the background with scripted
// input: tests type lines, press Ctrl-C, and read the screen.
type chatRun struct {
	stdin      *io.PipeWriter
	out        *syncbuf.Buffer
	interrupts chan os.Signal
	done       chan error
	seen       int // the screen up to here has been matched
}

func startChat(t *testing.T, env uiEnv, args ...string) *chatRun {
	t.Helper()
	pr, pw := io.Pipe()
	r := &chatRun{stdin: pw, out: &syncbuf.Buffer{}, interrupts: make(chan os.Signal, 1), done: make(chan error, 1)}
	env.stdin, env.stdout, env.stderr = pr, r.out, r.out
	env.notifyInterrupt = func() (<-chan os.Signal, func()) { return r.interrupts, func() {} }
	ctx, cancel := context.WithCancel(context.Background())
	go func() { r.done <- runChat(ctx, args, env) }()
	t.Cleanup(func() {
		// The end of input lets the line reader go (goleak).
		_ = pw.Close()
		cancel()
	})
	return r
}

// expect waits until the screen, after what earlier calls matched, shows
// want.
func (r *chatRun) expect(t *testing.T, want string) {
	t.Helper()
	poll.Until(t, "the chat to show "+want, func() bool {
		i := strings.Index(r.out.String()[r.seen:], want)
		if i < 0 {
			return false
		}
		r.seen += i + len(want)
		return true
	})
}

func (r *chatRun) typeLine(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(r.stdin, line+"\n"); err != nil {
		t.Fatal(err)
	}
}

func (r *chatRun) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.done:
		return err
	case <-time.After(poll.Timeout):
		t.Fatalf("the chat did not end; screen:\n%s", r.out.String())
		return nil
	}
}

func TestChat(t *testing.T) {
	const token = "live-token"
	g := newLiveGoose(t)
	agentURL := startLiveAgent(t, g, token)
	args := []string{"--url", agentURL, "--token", token, "--user", "alice"}

	t.Run("streams turns and leaves at the end of input", func(t *testing.T) {
		r := startChat(t, uiEnv{}, args...)
		r.expect(t, "Chatting with goose as alice in session ")
		r.expect(t, "Ctrl-D or /quit leaves.\n> ")
		r.typeLine(t, "hello goose")
		// The final event repeats the streamed text: shown once.
		r.expect(t, "You said: hello goose. I am goose.\n> ")
		// A partial event shows before the turn ends.
		r.typeLine(t, "hold")
		r.expect(t, "Let me think about that for a long while.")
		if strings.HasSuffix(r.out.String(), "> ") {
			t.Fatal("the prompt came back before the turn ended")
		}
		close(g.release)
		r.expect(t, " Done.\n> ")
		_ = r.stdin.Close() // Ctrl-D
		if err := r.wait(t); err != nil {
			t.Fatalf("leaving at the end of input: %v", err)
		}
		if strings.Count(r.out.String(), "hello goose. I am goose.") != 1 {
			t.Fatalf("a reply shown twice or not at all:\n%s", r.out.String())
		}
		// The agent saw the socket close: the runner ended its live session.
		poll.Until(t, "the live session to end", func() bool { _, ended := g.recorded(); return ended >= 1 })
	})

	t.Run("approvals answered y and n", func(t *testing.T) {
		r := startChat(t, uiEnv{}, args...)
		r.expect(t, "> ")
		r.typeLine(t, "please run a tool")
		r.expect(t, "I will list the files first.\n[tool shell {\"command\":\"ls\"}]\n")
		r.expect(t, "\n[approval] goose wants to use shell:\n  command: ls\nReply yes to allow it this once, or no to refuse.\nallow? [y/n] ")
		r.typeLine(t, "y")
		r.expect(t, "[result {\"output\":\"README.md go.mod main.go\"}]\nThere are three files: README.md, go.mod and main.go.\n> ")

		r.typeLine(t, "please run a tool")
		r.expect(t, "allow? [y/n] ")
		r.typeLine(t, "maybe")
		r.expect(t, "Please answer y or n. allow? [y/n] ")
		r.typeLine(t, "n")
		r.expect(t, "I did not run it.\n> ")
		// Ctrl-C at an approval answers no.
		r.typeLine(t, "please run a tool")
		r.expect(t, "allow? [y/n] ")
		r.interrupts <- os.Interrupt
		r.expect(t, "n (Ctrl-C)\nI did not run it.\n> ")
		r.typeLine(t, "/quit")
		if err := r.wait(t); err != nil {
			t.Fatalf("/quit: %v", err)
		}
		answers, _ := g.recorded()
		if len(answers) != 3 {
			t.Fatalf("%d answers reached the agent", len(answers))
		}
		for i, want := range []bool{true, false, false} {
			a := answers[i]
			if a.ID != "adk-confirm-1" || a.Name != toolconfirmation.FunctionCallName || len(a.Response) != 1 || a.Response["confirmed"] != want {
				t.Errorf("answer %d: %+v, want confirmed %v", i, a, want)
			}
		}
		if strings.Contains(r.out.String(), "NOT_PENDING") {
			t.Fatalf("an answer was refused:\n%s", r.out.String())
		}
	})

	t.Run("Ctrl-C stops a turn and keeps the chat", func(t *testing.T) {
		r := startChat(t, uiEnv{}, args...)
		r.expect(t, "> ")
		r.interrupts <- os.Interrupt // at the prompt: only says how to leave
		r.expect(t, "\n(Ctrl-D or /quit leaves)\n> ")
		r.typeLine(t, "something slow")
		r.expect(t, "Let me think about that for a long while.")
		r.interrupts <- os.Interrupt
		r.expect(t, " [stopping]\n[GOOSE_CANCELLED: turn stopped by the client (activityStart): context canceled]\n> ")
		r.typeLine(t, "are you still there")
		r.expect(t, "You said: are you still there. I am goose.\n> ")
		_ = r.stdin.Close()
		if err := r.wait(t); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("the agent closes the chat", func(t *testing.T) {
		r := startChat(t, uiEnv{}, args...)
		r.expect(t, "> ")
		r.typeLine(t, "fail")
		err := r.wait(t)
		if err == nil || !strings.Contains(err.Error(), "the agent closed the chat: goose is gone (code 1011)") {
			t.Fatalf("error %v; screen:\n%s", err, r.out.String())
		}
	})

	t.Run("an existing session", func(t *testing.T) {
		r := startChat(t, uiEnv{}, args...)
		r.expect(t, "in session ")
		r.expect(t, ". Ctrl-C")
		screen := r.out.String()
		sess := screen[strings.Index(screen, "in session ")+len("in session ") : strings.Index(screen, ". Ctrl-C")]
		r.typeLine(t, "one")
		r.expect(t, "You said: one. I am goose.\n> ")
		_ = r.stdin.Close()
		if err := r.wait(t); err != nil {
			t.Fatal(err)
		}
		r = startChat(t, uiEnv{}, append(args, "--session", sess)...)
		r.expect(t, "in session "+sess+".")
		r.typeLine(t, "two")
		r.expect(t, "You said: two. I am goose.\n> ")
		_ = r.stdin.Close()
		if err := r.wait(t); err != nil {
			t.Fatal(err)
		}
		r = startChat(t, uiEnv{}, append(args, "--session", "nope")...)
		if err := r.wait(t); err == nil || !strings.Contains(err.Error(), `failed to find session "nope" of user "alice": the agent answered 404`) {
			t.Fatalf("unknown session: %v", err)
		}
	})

	t.Run("a wrong token", func(t *testing.T) {
		r := startChat(t, uiEnv{}, "--url", agentURL, "--token", "wrong")
		if err := r.wait(t); err == nil || !strings.Contains(err.Error(), "the agent rejected the token") {
			t.Fatalf("%v", err)
		}
	})
}

// TestChatThroughPortForward: goosectl chat NAME finds the agent's ready
// pod and token as goosectl ui does (a real API server), and chats through
// the port-forward.
func TestChatThroughPortForward(t *testing.T) {
	env := testenv.Start(t)
	ctx := t.Context()
	c := env.Client
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "chat-"}}
	must(t, c.Create(ctx, nsObj))
	ns := nsObj.Name
	const token = "tok-from-secret"
	fwd := &tcpForwarder{target: strings.TrimPrefix(startLiveAgent(t, newLiveGoose(t), token), "http://")}
	chatEnv := uiEnv{newForwarder: func(*rest.Config) (podForwarder, error) { return fwd, nil }}
	args := []string{"coder", "-n", ns, "--kubeconfig", env.Kubeconfig}

	r := startChat(t, chatEnv, args...)
	if err := r.wait(t); err == nil || !strings.Contains(err.Error(), `chat: GooseAgent "coder" not found in namespace "`+ns+`"`) {
		t.Fatalf("unknown agent: %v", err)
	}
	must(t, c.Create(ctx, &agentsv1alpha1.GooseAgent{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coder"},
		Spec:       agentsv1alpha1.GooseAgentSpec{Provider: agentsv1alpha1.ProviderSpec{Name: "ollama", Model: "qwen3:8b"}},
	}))
	sel := map[string]string{"app.kubernetes.io/instance": "coder"}
	must(t, c.Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coder"},
		Spec: corev1.ServiceSpec{Selector: sel, Ports: []corev1.ServicePort{
			{Name: "http", Port: 8080, TargetPort: intstr.FromString("http")},
		}},
	}))
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coder-0", Labels: sel},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "adk2goose", Image: "adk2goose", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 9090}}},
		}},
	}
	must(t, c.Create(ctx, p))
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	must(t, c.Status().Update(ctx, p))
	must(t, c.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coder-adk2goose"},
		Data:       map[string][]byte{"auth-token": []byte(token)},
	}))

	r = startChat(t, chatEnv, args...)
	r.expect(t, "Forwarding 127.0.0.1:")
	r.expect(t, " -> pod "+ns+"/coder-0 port 9090\nChatting with goose as user in session ")
	r.expect(t, "> ")
	r.typeLine(t, "hello through the forward")
	r.expect(t, "You said: hello through the forward. I am goose.\n> ")
	_ = r.stdin.Close()
	if err := r.wait(t); err != nil {
		t.Fatal(err)
	}
	if got := fwd.calls(); len(got) != 1 || got[0] != ns+"/coder-0:9090" {
		t.Fatalf("forwarded to %v", got)
	}
}

// TestChatForwardLost: the loop ends with the port-forward's loss.
func TestChatForwardLost(t *testing.T) {
	const token = "t"
	base, err := url.Parse(startLiveAgent(t, newLiveGoose(t), token))
	must(t, err)
	ep := &agentEndpoint{base: base, cred: staticCredential("test", token)}
	sess, err := createSession(t.Context(), ep, "goose", "user")
	must(t, err)
	ws, err := dialLive(t.Context(), ep, "goose", "user", sess)
	must(t, err)
	defer ws.Close()
	pr, pw := io.Pipe()
	defer pw.Close()
	var out syncbuf.Buffer
	lost := make(chan error, 1)
	lost <- errors.New("lost connection to pod")
	err = newChat(ws, pr, &out, nil).run(t.Context(), lost)
	if fl := (forwardLostError{}); !errors.As(err, &fl) || err.Error() != "lost connection to pod" {
		t.Fatalf("%v", err)
	}
}

func TestParseChat(t *testing.T) {
	o, err := parseChat([]string{"coder"}, io.Discard)
	if err != nil || o.name != "coder" || o.user != "" || o.url != "" || o.sess != "" {
		t.Fatalf("%v %+v", err, o)
	}
	o, err = parseChat([]string{"-n", "team", "coder", "--user", "alice", "--session=s1", "--token-file", "/t", "--app", "a"}, io.Discard)
	if err != nil || o.name != "coder" || o.namespace != "team" || o.user != "alice" || o.sess != "s1" || o.credential.tokenFile != "/t" || o.app != "a" {
		t.Fatalf("%v %+v", err, o)
	}
	if o, err = parseChat([]string{"--url", "http://127.0.0.1:1"}, io.Discard); err != nil || o.url != "http://127.0.0.1:1" || o.name != "" {
		t.Fatalf("%v %+v", err, o)
	}
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"no name":      {nil, "NAME (or --url) is required"},
		"name and url": {[]string{"a", "--url", "http://x"}, "or --url, not both"},
		"two names":    {[]string{"a", "b"}, `got ["a" "b"]`},
		"both tokens":  {[]string{"a", "--token", "x", "--token-file", "y"}, "exclusive"},
	} {
		if _, err := parseChat(c.args, io.Discard); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v", name, err)
		}
	}
	var usage strings.Builder
	if _, err := parseChat([]string{"-h"}, &usage); !errors.Is(err, flag.ErrHelp) || !strings.Contains(usage.String(), "goosectl chat NAME") {
		t.Fatalf("help: %v %q", err, usage.String())
	}
	for _, bad := range []string{"ftp://x", "127.0.0.1:8080", "http://"} {
		if err := runChat(t.Context(), []string{"--url", bad}, uiEnv{stdout: io.Discard, stderr: io.Discard}); err == nil ||
			!strings.Contains(err.Error(), "is not an http:// or https:// URL") {
			t.Errorf("--url %s: %v", bad, err)
		}
	}
}

func TestSanitize(t *testing.T) {
	if got := sanitize("a\x1b]0;title\x07b\tc\nd\u009be"); got != "a]0;titleb\tc\nde" {
		t.Fatalf("%q", got)
	}
	if got := compactJSON(map[string]any{"x": strings.Repeat("y", 500)}); len([]rune(got)) != maxShown+1 || !strings.HasSuffix(got, "…") {
		t.Fatalf("%d runes: %q", len([]rune(got)), got)
	}
}
