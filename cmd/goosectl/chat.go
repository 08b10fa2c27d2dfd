package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
	"unicode"

	"github.com/gorilla/websocket"
	"google.golang.org/adk/tool/toolconfirmation"
	"google.golang.org/genai"
)

const chatUsage = `usage: goosectl chat NAME [-n NAMESPACE] [--kubeconfig FILE] [--context CTX] [--user USER] [--session ID] [--token-file FILE | --token TOKEN]
       goosectl chat --url URL [--user USER] [--session ID] [--token-file FILE | --token TOKEN]

Chats with the GooseAgent NAME in this terminal over ADK's /run_live
WebSocket: it port-forwards to a ready pod behind the agent's Service (or
talks to the sidecar at URL), creates a session unless --session names one,
and streams goose's replies as they come. A tool approval asks allow? [y/n];
Ctrl-C stops the running turn and keeps the chat; Ctrl-D or /quit leaves.
`

type chatOptions struct {
	agentFlags
	name, url       string
	app, user, sess string
}

func parseChat(args []string, stderr io.Writer) (*chatOptions, error) {
	o := &chatOptions{}
	fs := flag.NewFlagSet("goosectl chat", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, chatUsage+"\nflags:\n")
		fs.PrintDefaults()
	}
	o.register(fs)
	fs.StringVar(&o.url, "url", "", "the agent's sidecar at this URL instead of a port-forward to GooseAgent NAME")
	fs.StringVar(&o.user, "user", "", "ADK user id of the chat (default: who the agent says you are (GET /whoami), else user)")
	fs.StringVar(&o.sess, "session", "", "continue this existing ADK session instead of creating one")
	fs.StringVar(&o.app, "app", "", "ADK app (default: the agent's only app)")
	names, err := parseNames(fs, args)
	if err != nil {
		return nil, err
	}
	switch {
	case len(names) == 0 && o.url == "":
		fs.Usage()
		return nil, errors.New("chat: the GooseAgent NAME (or --url) is required")
	case len(names) > 0 && o.url != "":
		return nil, fmt.Errorf("chat: a GooseAgent NAME (%q) or --url, not both", names)
	case len(names) > 1:
		return nil, fmt.Errorf("chat: one GooseAgent NAME expected, got %q", names)
	}
	if err := o.check("chat"); err != nil {
		return nil, err
	}
	if len(names) == 1 {
		o.name = names[0]
	}
	return o, nil
}

// runChat is `goosectl chat`. It returns nil when the user leaves (Ctrl-D,
// /quit) or ctx ends, and an error if setup fails, the agent closes the chat
// or the port-forward is lost.
func runChat(ctx context.Context, args []string, env uiEnv) error {
	o, err := parseChat(args, env.stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	var ep *agentEndpoint
	if o.url != "" {
		ep, err = dialURL(ctx, "chat", o.url, &o.agentFlags)
	} else {
		ep, err = forwardToAgent(ctx, "chat", o.name, &o.agentFlags, env)
	}
	if err != nil {
		return err
	}
	defer ep.close()

	app := o.app
	switch {
	case app == "" && len(ep.apps) == 1:
		app = ep.apps[0]
	case app == "":
		return fmt.Errorf("chat: the agent serves apps %q: pick one with --app", ep.apps)
	}
	switch {
	case o.user != "":
	case ep.me.User != "":
		o.user = ep.me.User
	default:
		o.user = "user"
	}
	sess := o.sess
	if sess == "" {
		sess, err = createSession(ctx, ep, app, o.user)
	} else {
		err = findSession(ctx, ep, app, o.user, sess)
	}
	if err != nil {
		return fmt.Errorf("chat: %w", err)
	}
	ws, err := dialLive(ctx, ep, app, o.user, sess)
	if err != nil {
		return fmt.Errorf("chat: %w", err)
	}
	defer ws.Close()

	var interrupts <-chan os.Signal
	if env.notifyInterrupt != nil {
		var stop func()
		interrupts, stop = env.notifyInterrupt()
		defer stop()
	}
	fmt.Fprintf(env.stdout, "Chatting with %s as %s in session %s. Ctrl-C stops a turn; Ctrl-D or /quit leaves.\n", app, o.user, sess)
	c := newChat(ws, env.stdin, env.stdout, interrupts)
	err = c.run(ctx, ep.lost)
	if fl := (forwardLostError{}); errors.As(err, &fl) {
		return fmt.Errorf("chat: lost the port-forward to %s: %w; run goosectl chat --session %s to continue", ep.where, fl.err, sess)
	}
	return err
}

// createSession makes the ADK session the chat runs in.
func createSession(ctx context.Context, ep *agentEndpoint, app, user string) (string, error) {
	id, err := sessionCall(ctx, ep, http.MethodPost, ep.base.JoinPath("apps", app, "users", user, "sessions"))
	if err != nil {
		return "", fmt.Errorf("failed to create a session: %w", err)
	}
	return id, nil
}

// findSession checks that --session names a session of the user, so that
// a typo fails with the agent's answer rather than as a closed socket.
func findSession(ctx context.Context, ep *agentEndpoint, app, user, id string) error {
	if _, err := sessionCall(ctx, ep, http.MethodGet, ep.base.JoinPath("apps", app, "users", user, "sessions", id)); err != nil {
		return fmt.Errorf("failed to find session %q of user %q: %w", id, user, err)
	}
	return nil
}

// sessionCall makes one ADK REST session request and returns the session's
// id.
func sessionCall(ctx context.Context, ep *agentEndpoint, method string, u *url.URL) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader("{}")
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	if err := ep.authorize(ctx, req.Header); err != nil {
		return "", err
	}
	resp, err := probeClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("the agent answered %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	var s struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(b, &s); err != nil || s.ID == "" {
		return "", fmt.Errorf("the agent answered %q, not a session", b)
	}
	return s.ID, nil
}

// maxEventSize caps one event from the agent; the sidecar's own cap on an
// event is 8 MiB.
const maxEventSize = 16 << 20

// dialLive opens adk-go's /run_live WebSocket for the session. A program,
// unlike a browser, can send the credential as a header.
func dialLive(ctx context.Context, ep *agentEndpoint, app, user, sess string) (*websocket.Conn, error) {
	u := *ep.base.JoinPath("run_live")
	u.Scheme = map[string]string{"http": "ws", "https": "wss"}[u.Scheme]
	// adkrest reads app_name or appName, and so on.
	u.RawQuery = url.Values{"app_name": {app}, "user_id": {user}, "session_id": {sess}}.Encode()
	h := http.Header{}
	if err := ep.authorize(ctx, h); err != nil {
		return nil, fmt.Errorf("failed to open /run_live: %w", err)
	}
	d := websocket.Dialer{HandshakeTimeout: 30 * time.Second, Proxy: http.ProxyFromEnvironment}
	ws, resp, err := d.DialContext(ctx, u.String(), h)
	if err != nil {
		if resp != nil {
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			return nil, fmt.Errorf("failed to open /run_live: the agent answered %s: %s", resp.Status, strings.TrimSpace(string(body)))
		}
		return nil, fmt.Errorf("failed to open /run_live: %w", err)
	}
	ws.SetReadLimit(maxEventSize)
	return ws, nil
}

// liveRequest is what a client sends on /run_live: adkrest's LiveRequest
// (server/adkrest/internal/models), of which goose takes text content,
// function responses, and activityStart to stop the running turn.
type liveRequest struct {
	Content       *genai.Content       `json:"content,omitempty"`
	ActivityStart *genai.ActivityStart `json:"activityStart,omitempty"`
}

// liveEvent is the part of adkrest's event JSON the chat shows.
type liveEvent struct {
	Partial      bool           `json:"partial"`
	TurnComplete bool           `json:"turnComplete"`
	Interrupted  bool           `json:"interrupted"`
	ErrorCode    string         `json:"errorCode"`
	ErrorMessage string         `json:"errorMessage"`
	Content      *genai.Content `json:"content"`
}

// socketMessage is one event read from the socket, or why reading ended.
type socketMessage struct {
	event *liveEvent
	err   error
}

type chatState int

const (
	atPrompt   chatState = iota // waiting for the user's next message
	inTurn                      // goose is replying; input waits
	atApproval                  // asking allow? [y/n]
)

// approval is one adk_request_confirmation call waiting for the user.
type approval struct {
	id, hint string
}

// forwardLostError: the port-forward the chat runs through ended by itself.
type forwardLostError struct{ err error }

func (e forwardLostError) Error() string { return e.err.Error() }
func (e forwardLostError) Unwrap() error { return e.err }

// liveChat is one terminal chat over an open /run_live socket. Only its run
// goroutine writes to the socket; one goroutine reads the socket and one
// reads the terminal.
type liveChat struct {
	ws         *websocket.Conn
	out        *chatPrinter
	in         io.Reader
	interrupts <-chan os.Signal

	state     chatState
	streamed  bool // partial text shown since the last non-partial event
	stopping  bool // an activityStart was sent in this turn
	approvals []approval
}

func newChat(ws *websocket.Conn, in io.Reader, out io.Writer, interrupts <-chan os.Signal) *liveChat {
	return &liveChat{ws: ws, in: in, out: &chatPrinter{w: out, atLineStart: true}, interrupts: interrupts}
}

// run is the chat loop. Input is read only at the prompt and at an
// approval; a line typed while goose replies waits for the turn's end.
func (c *liveChat) run(ctx context.Context, lost <-chan error) error {
	done := make(chan struct{})
	defer close(done)
	events := readSocket(c.ws, done)
	lines := readLines(c.in, done)
	c.prompt()
	for {
		var input <-chan string
		if c.state != inTurn {
			input = lines
		}
		select {
		case <-ctx.Done():
			return c.leave(events)
		case err := <-lost:
			c.out.endLine()
			return forwardLostError{err}
		case m := <-events:
			if m.err != nil {
				c.out.endLine()
				return closedError(m.err)
			}
			if err := c.show(m.event); err != nil {
				return err
			}
		case line, ok := <-input:
			if ok {
				// The Enter that ended the line moved a terminal's cursor.
				c.out.atLineStart = true
			}
			leave, err := c.input(line, ok)
			if err != nil {
				return err
			}
			if leave {
				return c.leave(events)
			}
		case <-c.interrupts:
			if err := c.interrupt(); err != nil {
				return err
			}
		}
	}
}

// input handles one line the user typed (ok false: end of input). It
// reports whether the user leaves.
func (c *liveChat) input(line string, ok bool) (leave bool, err error) {
	switch c.state {
	case atApproval:
		if !ok || line == "/quit" {
			// Deny rather than leave goose waiting for an answer.
			c.out.endLine()
			return true, c.answerAll(false)
		}
		switch strings.ToLower(strings.TrimSpace(line)) {
		case "y", "yes":
			return false, c.answer(true)
		case "n", "no":
			return false, c.answer(false)
		}
		c.out.print("Please answer y or n. allow? [y/n] ")
		return false, nil
	default:
		if !ok || strings.TrimSpace(line) == "/quit" {
			c.out.endLine()
			return true, nil
		}
		if strings.TrimSpace(line) == "" {
			c.prompt()
			return false, nil
		}
		c.state, c.stopping, c.streamed = inTurn, false, false
		return false, c.send(liveRequest{Content: genai.NewContentFromText(line, genai.RoleUser)})
	}
}

// interrupt is Ctrl-C: it stops the running turn with ADK's own interrupt,
// activityStart; at an approval it answers no; at the prompt it only says
// how to leave.
func (c *liveChat) interrupt() error {
	switch c.state {
	case inTurn:
		if !c.stopping {
			c.out.print(" [stopping]")
			c.stopping = true
		}
		return c.send(liveRequest{ActivityStart: &genai.ActivityStart{}})
	case atApproval:
		c.out.print(" n (Ctrl-C)\n")
		return c.answerAll(false)
	default:
		c.out.endLine()
		c.out.print("(Ctrl-D or /quit leaves)\n")
		c.prompt()
		return nil
	}
}

// show prints one event: text as it streams, tool calls and results on a
// line each, errors, and the approvals it asks for.
func (c *liveChat) show(ev *liveEvent) error {
	if ev.Content != nil {
		for _, p := range ev.Content.Parts {
			switch {
			case p == nil || p.Thought:
				// Reasoning and progress notes: not part of the reply.
			case p.FunctionCall != nil && p.FunctionCall.Name == toolconfirmation.FunctionCallName:
				c.approvals = append(c.approvals, approval{id: p.FunctionCall.ID, hint: approvalHint(p.FunctionCall.Args)})
			case p.FunctionCall != nil:
				c.out.line("[tool " + sanitize(p.FunctionCall.Name) + " " + compactJSON(p.FunctionCall.Args) + "]")
			case p.FunctionResponse != nil:
				c.out.line("[result " + compactJSON(p.FunctionResponse.Response) + "]")
			case p.Text != "" && ev.Partial:
				c.out.print(sanitize(p.Text))
				c.streamed = true
			case p.Text != "" && !c.streamed:
				// A non-partial event repeats the text its partials
				// streamed; without them it is the only copy.
				c.out.print(sanitize(p.Text))
			}
		}
	}
	if !ev.Partial {
		c.streamed = false
	}
	if ev.ErrorCode != "" || ev.ErrorMessage != "" {
		c.out.line("[" + sanitize(strings.TrimPrefix(ev.ErrorCode+": "+ev.ErrorMessage, ": ")) + "]")
	}
	switch {
	case len(c.approvals) > 0 && c.state != atApproval:
		c.ask()
	case c.state == inTurn && (ev.TurnComplete || ev.Interrupted):
		c.state = atPrompt
		c.prompt()
	}
	return nil
}

func (c *liveChat) ask() {
	c.state = atApproval
	c.out.endLine()
	c.out.print("\n[approval] " + c.approvals[0].hint + "\nallow? [y/n] ")
}

// answer sends the user's decision on the first waiting approval, as the
// functionResponse adk-go's confirmation flow expects.
func (c *liveChat) answer(confirmed bool) error {
	a := c.approvals[0]
	c.approvals = c.approvals[1:]
	err := c.send(liveRequest{Content: &genai.Content{Role: genai.RoleUser, Parts: []*genai.Part{{
		FunctionResponse: &genai.FunctionResponse{ID: a.id, Name: toolconfirmation.FunctionCallName, Response: map[string]any{"confirmed": confirmed}},
	}}}})
	if err != nil {
		return err
	}
	if len(c.approvals) > 0 {
		c.ask()
		return nil
	}
	c.state, c.streamed = inTurn, false
	return nil
}

func (c *liveChat) answerAll(confirmed bool) error {
	for len(c.approvals) > 0 {
		if err := c.answer(confirmed); err != nil {
			return err
		}
	}
	return nil
}

func (c *liveChat) prompt() {
	c.out.endLine()
	c.out.print("> ")
}

func (c *liveChat) send(r liveRequest) error {
	_ = c.ws.SetWriteDeadline(time.Now().Add(30 * time.Second))
	if err := c.ws.WriteJSON(r); err != nil {
		c.out.endLine()
		return fmt.Errorf("chat: failed to send to the agent: %w", err)
	}
	return nil
}

// leave closes the socket as WebSocket asks, then waits briefly for the
// agent's close in reply, so that the agent ends the session's work now.
func (c *liveChat) leave(events <-chan socketMessage) error {
	deadline := time.Now().Add(3 * time.Second)
	msg := websocket.FormatCloseMessage(websocket.CloseNormalClosure, "")
	if err := c.ws.WriteControl(websocket.CloseMessage, msg, deadline); err != nil {
		return nil // the socket is already gone: nothing is left to end
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		select {
		case m := <-events:
			if m.err != nil {
				return nil
			}
		case <-timer.C:
			return nil
		}
	}
}

// closedError says why the socket ended when the user did not leave.
func closedError(err error) error {
	var ce *websocket.CloseError
	if errors.As(err, &ce) {
		if ce.Text == "" {
			return fmt.Errorf("chat: the agent closed the chat (code %d)", ce.Code)
		}
		return fmt.Errorf("chat: the agent closed the chat: %s (code %d)", sanitize(ce.Text), ce.Code)
	}
	return fmt.Errorf("chat: lost the connection to the agent: %w", err)
}

// readSocket reads events until the socket fails or closes; the last
// message carries why. It stops when done is closed.
func readSocket(ws *websocket.Conn, done <-chan struct{}) <-chan socketMessage {
	ch := make(chan socketMessage)
	go func() {
		for {
			var m socketMessage
			typ, data, err := ws.ReadMessage()
			switch {
			case err != nil:
				m.err = err
			case typ != websocket.TextMessage:
				m.event = &liveEvent{ErrorCode: "CHAT", ErrorMessage: fmt.Sprintf("ignored a binary message of %d bytes from the agent", len(data))}
			default:
				m.event = &liveEvent{}
				if err := json.Unmarshal(data, m.event); err != nil {
					m.event = &liveEvent{ErrorCode: "CHAT", ErrorMessage: fmt.Sprintf("ignored a message from the agent that is not an event: %v", err)}
				}
			}
			select {
			case ch <- m:
			case <-done:
				return
			}
			if m.err != nil {
				return
			}
		}
	}()
	return ch
}

// readLines reads the user's lines; the channel closes at the end of input.
// Until then the goroutine blocks in Read, which nothing can interrupt: a
// program leaves it behind when it exits.
func readLines(r io.Reader, done <-chan struct{}) <-chan string {
	ch := make(chan string)
	go func() {
		defer close(ch)
		br := bufio.NewReader(r)
		for {
			line, err := br.ReadString('\n')
			if line != "" {
				select {
				case ch <- strings.TrimRight(line, "\r\n"):
				case <-done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	return ch
}

// chatPrinter writes the chat and knows whether the cursor is at the start
// of a line.
type chatPrinter struct {
	w           io.Writer
	atLineStart bool
}

func (p *chatPrinter) print(s string) {
	if s == "" {
		return
	}
	_, _ = io.WriteString(p.w, s)
	p.atLineStart = strings.HasSuffix(s, "\n")
}

// line prints s on a line of its own.
func (p *chatPrinter) line(s string) {
	p.endLine()
	p.print(s + "\n")
}

func (p *chatPrinter) endLine() {
	if !p.atLineStart {
		p.print("\n")
	}
}

// approvalHint is the question adk-go's confirmation call carries
// (toolConfirmation.hint), else the tool and its arguments.
func approvalHint(args map[string]any) string {
	if tc, ok := args["toolConfirmation"].(map[string]any); ok {
		if h, ok := tc["hint"].(string); ok && strings.TrimSpace(h) != "" {
			return sanitize(h)
		}
	}
	if fc, ok := args["originalFunctionCall"].(map[string]any); ok {
		name, _ := fc["name"].(string)
		return "the agent wants to use " + sanitize(name) + " " + compactJSON(fc["args"])
	}
	return "the agent asks to confirm " + compactJSON(args)
}

// maxShown bounds a tool call's arguments or result on the screen.
const maxShown = 200

// compactJSON shows v as one line of JSON, cut at maxShown runes.
func compactJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	s := sanitize(string(b))
	if r := []rune(s); len(r) > maxShown {
		s = string(r[:maxShown]) + "…"
	}
	return s
}

// sanitize drops control characters other than newline and tab, so that
// text from the agent cannot move the cursor or retitle the terminal.
func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' || !unicode.IsControl(r) {
			return r
		}
		return -1
	}, s)
}
