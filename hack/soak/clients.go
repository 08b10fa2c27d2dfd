package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	_ "modernc.org/sqlite" // PRAGMA integrity_check on copies of the sidecar's files

	"github.com/adk2goose/goose-operator/hack/internal/sidecarproc"
	"github.com/adk2goose/goose-operator/internal/bearer"
)

// slowReadPause is how long a slow client waits between events.
const slowReadPause = 30 * time.Millisecond

// usageKeyPrefix prefixes the session-state key of goose's token totals
// (gooseagent.UsageStateKey).
const usageKeyPrefix = "goose:usage:"

func (s *soak) url(replica int) string { return "http://" + s.reps[replica].listen }

// streamResult is what one /run_sse request showed its client.
type streamResult struct {
	outcome      Outcome
	detail       string
	confirmation string // the adk_request_confirmation call's id
	usage        []int64
}

// restTurn runs a turn over ADK REST: the run, and for an approval the
// answers as scripted.
func (s *soak) restTurn(ctx context.Context, rec *TurnRecord, sess *sessionState) {
	t := rec.Turn
	base := s.url(t.Replica)
	if !sess.created {
		if err := s.createSession(ctx, base, sess); err != nil {
			rec.Outcome, rec.Detail = classify(err), "create session: "+err.Error()
			return
		}
		sess.created = true
	}
	leave := t.Kind == Cancel || t.Client == Disconnect
	res := s.runSSE(ctx, base, runBody(sess, map[string]any{"text": prompt(t)}), leave, t.Client == SlowRead)
	rec.Outcome, rec.Detail, rec.UsageTotals = res.outcome, res.detail, res.usage
	if t.Kind != Approval || res.outcome != Confirm {
		return
	}
	rec.ConfirmationID = res.confirmation
	body := runBody(sess, map[string]any{"functionResponse": map[string]any{
		"id": res.confirmation, "name": "adk_request_confirmation", "response": map[string]any{"confirmed": true},
	}})
	answer := func() streamResult { return s.runSSE(ctx, base, body, false, false) }
	var answers []streamResult
	switch t.Answer {
	case AnswerOnce:
		answers = []streamResult{answer()}
	case AnswerTwice:
		answers = make([]streamResult, 2)
		var wg sync.WaitGroup
		for i := range answers {
			wg.Go(func() { answers[i] = answer() })
		}
		wg.Wait()
	case AnswerLate:
		select {
		case <-ctx.Done():
		case <-time.After(confirmationTimeout + time.Second):
		}
		answers = []streamResult{answer()}
	case AnswerAfterRestart:
		if err := s.restartOwner(ctx, sess); err != nil {
			rec.Detail = "restart: " + err.Error()
		}
		answers = []streamResult{answer()}
	}
	rec.Outcome, rec.Detail = answers[0].outcome, answers[0].detail
	for _, a := range answers {
		rec.Answers = append(rec.Answers, a.outcome)
		rec.AnswerDetails = append(rec.AnswerDetails, a.detail)
		rec.UsageTotals = append(rec.UsageTotals, a.usage...)
		if a.outcome == Answered {
			rec.Outcome, rec.Detail = a.outcome, a.detail
		}
	}
}

func runBody(sess *sessionState, part map[string]any) map[string]any {
	return map[string]any{
		"appName": sidecarproc.AppName, "userId": sess.user, "sessionId": sess.id, "streaming": true,
		"newMessage": map[string]any{"role": "user", "parts": []any{part}},
	}
}

// createSession creates the session; one an earlier, failed-looking attempt
// made counts as created.
func (s *soak) createSession(ctx context.Context, base string, sess *sessionState) error {
	status, body, err := s.do(ctx, http.MethodPost, base+"/apps/"+sidecarproc.AppName+"/users/"+sess.user+"/sessions/"+sess.id, nil, nil)
	switch {
	case err != nil:
		return err
	case status == http.StatusOK || strings.Contains(string(body), "exists"):
		return nil
	}
	return fmt.Errorf("HTTP %d: %s", status, bytes.TrimSpace(body))
}

// restartOwner drains and restarts the sidecar that owns the session.
func (s *soak) restartOwner(ctx context.Context, sess *sessionState) error {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	owner := s.reps[0]
	for _, r := range s.reps {
		q := url.Values{"user": {sess.user}, "session": {sess.id}}
		status, _, err := s.do(ctx, http.MethodGet, s.url(r.idx)+"/peer/v1/owner?"+q.Encode(), map[string]string{"X-Adk2goose-Peer-Hop": "1"}, nil)
		if err == nil && status == http.StatusOK {
			owner = r
		}
	}
	return s.restartSidecar(ctx, owner, syscall.SIGTERM)
}

// runSSE posts a /run_sse and reads its events: leave makes the client go
// away after the first delta, slow pause between events.
func (s *soak) runSSE(ctx context.Context, base string, body map[string]any, leave, slow bool) streamResult {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var res streamResult
	status, errBody, err := s.do(ctx, http.MethodPost, base+"/run_sse", nil, body, func(resp *http.Response) error {
		r := bufio.NewReader(resp.Body)
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				if errors.Is(err, io.EOF) && res.outcome != "" {
					return nil
				}
				res.outcome, res.detail = Truncated, fmt.Sprintf("after %q: %v", res.detail, err)
				if errors.Is(err, io.EOF) {
					res.detail = "the stream ended: " + res.detail
				}
				return nil
			}
			data, ok := bytes.CutPrefix(line, []byte("data: "))
			if !ok {
				continue
			}
			var ev sseEvent
			if err := json.Unmarshal(data, &ev); err != nil {
				res.outcome, res.detail = Truncated, fmt.Sprintf("an event that is not JSON: %q", data)
				return nil
			}
			if ev.ErrorCode != "" || ev.Error != "" {
				res.outcome, res.detail = ErrorEvt, strings.TrimSpace(ev.ErrorCode+" "+ev.ErrorMessage+ev.Error)
				continue
			}
			if ev.Partial {
				if leave {
					res.outcome, res.detail = Left, "left after the first delta"
					return nil
				}
			} else {
				text, confirmation := ev.parts()
				if tot, ok := ev.usageTotal(); ok {
					res.usage = append(res.usage, tot)
				}
				switch {
				case confirmation != "":
					res.outcome, res.confirmation, res.detail = Confirm, confirmation, "asked for a confirmation"
				case strings.Contains(text, "ans-"):
					res.outcome, res.detail = Answered, text
				case res.outcome == "" && ev.TurnComplete:
					res.outcome, res.detail = Truncated, "a final event with neither the answer nor an error: "+text
				}
			}
			if slow {
				time.Sleep(slowReadPause)
			}
		}
	})
	switch {
	case err != nil && res.outcome == Left:
	case err != nil:
		res.outcome, res.detail = classify(err), err.Error()
	case status != http.StatusOK:
		res.outcome, res.detail = ErrorEvt, fmt.Sprintf("HTTP %d: %s", status, bytes.TrimSpace(errBody))
		if len(bytes.TrimSpace(errBody)) == 0 {
			res.outcome = Truncated // an error with no reason is not a clear one
		}
	case res.outcome == "":
		res.outcome, res.detail = Truncated, "no events"
	}
	return res
}

// classify names a request's failure: refused (nothing answered), or hung
// when its deadline passed.
func classify(err error) Outcome {
	if errors.Is(err, context.DeadlineExceeded) {
		return Hung
	}
	return Refused
}

// sseEvent is the part of an ADK event the soak reads.
type sseEvent struct {
	Partial            bool     `json:"partial"`
	TurnComplete       bool     `json:"turnComplete"`
	ErrorCode          string   `json:"errorCode"`
	ErrorMessage       string   `json:"errorMessage"`
	Error              string   `json:"error"`
	LongRunningToolIDs []string `json:"longRunningToolIds"`
	Content            *struct {
		Parts []struct {
			Text         string `json:"text"`
			FunctionCall *struct {
				ID   string `json:"id"`
				Name string `json:"name"`
			} `json:"functionCall"`
			FunctionResponse *struct {
				ID string `json:"id"`
			} `json:"functionResponse"`
		} `json:"parts"`
	} `json:"content"`
	Actions struct {
		StateDelta map[string]json.RawMessage `json:"stateDelta"`
	} `json:"actions"`
	UsageMetadata *struct {
		TotalTokenCount int64 `json:"totalTokenCount"`
	} `json:"usageMetadata"`
}

// parts returns the event's text and the id of the confirmation it asks for.
func (e *sseEvent) parts() (text, confirmation string) {
	if e.Content == nil {
		return "", ""
	}
	var b strings.Builder
	for _, p := range e.Content.Parts {
		b.WriteString(p.Text)
		if fc := p.FunctionCall; fc != nil && fc.Name == "adk_request_confirmation" && len(e.LongRunningToolIDs) > 0 {
			confirmation = fc.ID
		}
	}
	return b.String(), confirmation
}

// usageTotal is the session's token total in the event's state delta.
func (e *sseEvent) usageTotal() (int64, bool) {
	return usageIn(e.Actions.StateDelta)
}

func usageIn(state map[string]json.RawMessage) (int64, bool) {
	for k, v := range state {
		if !strings.HasPrefix(k, usageKeyPrefix) {
			continue
		}
		var u struct {
			TotalTokens int64 `json:"totalTokens"`
		}
		if json.Unmarshal(v, &u) == nil {
			return u.TotalTokens, true
		}
	}
	return 0, false
}

// a2aClients are the A2A clients of each replica, made once its card could
// be read.
type a2aClients struct {
	hc      *http.Client
	mu      sync.Mutex
	clients map[string]*a2aclient.Client
}

func newA2AClients(hc *http.Client) *a2aClients {
	return &a2aClients{hc: &http.Client{Transport: bearer.Transport{Token: sidecarproc.Token, Base: hc.Transport}}, clients: map[string]*a2aclient.Client{}}
}

func (c *a2aClients) client(ctx context.Context, base string) (*a2aclient.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl, ok := c.clients[base]; ok {
		return cl, nil
	}
	card, err := agentcard.NewResolver(c.hc).Resolve(ctx, base)
	if err != nil {
		return nil, fmt.Errorf("failed to read the agent card: %w", err)
	}
	cl, err := a2aclient.NewFromCard(ctx, card, a2aclient.WithJSONRPCTransport(c.hc))
	if err != nil {
		return nil, fmt.Errorf("failed to make an A2A client: %w", err)
	}
	c.clients[base] = cl
	return cl, nil
}

// a2aTurn runs a turn over A2A message/stream; a cancel turn cancels the
// task after the first output.
func (s *soak) a2aTurn(ctx context.Context, rec *TurnRecord, sess *sessionState) {
	t := rec.Turn
	c, err := s.a2a.client(ctx, s.url(t.Replica))
	if err != nil {
		rec.Outcome, rec.Detail = classify(err), err.Error()
		return
	}
	for {
		s.a2aStream(ctx, rec, sess, c)
		if rec.Outcome != ErrorEvt || !strings.Contains(rec.Detail, "503") && !strings.Contains(rec.Detail, "connection refused") {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(retryPause):
		}
	}
}

// a2aStream sends the turn's message once.
func (s *soak) a2aStream(ctx context.Context, rec *TurnRecord, sess *sessionState, c *a2aclient.Client) {
	t := rec.Turn
	rec.Outcome, rec.Detail = "", ""
	msg := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart(prompt(t)))
	msg.ContextID = sess.id
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		text      strings.Builder
		contextID string
		taskID    a2a.TaskID
		state     a2a.TaskState
		events    int
		left      bool
		// seen names the events in order, for a history that shows a
		// stream that ended without an answer.
		seen []string
	)
	texts := func(parts []*a2a.Part) {
		for _, p := range parts {
			text.WriteString(p.Text())
		}
	}
	for ev, err := range c.SendStreamingMessage(sctx, &a2a.SendMessageRequest{Message: msg}) {
		if err != nil {
			var rpcErr *a2a.Error
			switch {
			case left:
			case events == 0 && !errors.Is(err, context.DeadlineExceeded),
				errors.As(err, &rpcErr):
				// A JSON-RPC error (the drain's, mid-stream), or a refused
				// connection before any event.
				rec.Outcome, rec.Detail = ErrorEvt, err.Error()
			default:
				rec.Outcome, rec.Detail = Truncated, fmt.Sprintf("after %d events: %v", events, err)
			}
			break
		}
		events++
		seen = append(seen, a2aEventName(ev))
		switch e := ev.(type) {
		case *a2a.Task:
			contextID, taskID, state = e.ContextID, e.ID, e.Status.State
			for _, a := range e.Artifacts {
				texts(a.Parts)
			}
		case *a2a.TaskStatusUpdateEvent:
			contextID, taskID, state = e.ContextID, e.TaskID, e.Status.State
			if e.Status.Message != nil {
				texts(e.Status.Message.Parts)
			}
		case *a2a.TaskArtifactUpdateEvent:
			contextID, taskID = e.ContextID, e.TaskID
			texts(e.Artifact.Parts)
			if !left && t.Client == Disconnect {
				left = true
				stop()
			} else if !left && t.Kind == Cancel {
				left = true
				if _, err := c.CancelTask(ctx, &a2a.CancelTaskRequest{ID: taskID}); err != nil {
					rec.Detail = "cancel: " + err.Error()
				}
			}
		case *a2a.Message:
			contextID = e.ContextID
			texts(e.Parts)
		}
		if t.Client == SlowRead {
			time.Sleep(slowReadPause)
		}
	}
	if sess.id == "" && contextID != "" {
		sess.id, sess.user = contextID, "A2A_USER_"+contextID
	}
	if rec.Outcome != "" {
		return
	}
	switch {
	case left:
		rec.Outcome = Left
	case state == a2a.TaskStateCompleted && strings.Contains(text.String(), "ans-"):
		rec.Outcome, rec.Detail = Answered, text.String()
	case state == a2a.TaskStateFailed || state == a2a.TaskStateRejected || state == a2a.TaskStateCanceled:
		rec.Outcome, rec.Detail = ErrorEvt, fmt.Sprintf("task %s: %s", state, text.String())
	default:
		rec.Outcome, rec.Detail = Truncated, fmt.Sprintf("the stream ended in state %q: %q (task %s; events: %s)", state, text.String(), taskID, strings.Join(seen, " "))
	}
}

// a2aEventName is an A2A event's kind, with the task state it carries.
func a2aEventName(ev a2a.Event) string {
	switch e := ev.(type) {
	case *a2a.Task:
		return "task:" + string(e.Status.State)
	case *a2a.TaskStatusUpdateEvent:
		return "status:" + string(e.Status.State)
	case *a2a.TaskArtifactUpdateEvent:
		return fmt.Sprintf("artifact:%d-parts", len(e.Artifact.Parts))
	case *a2a.Message:
		return "message"
	}
	return fmt.Sprintf("%T", ev)
}

// stored reads a session as the sidecars stored it.
func (s *soak) stored(ctx context.Context, sess *sessionState) (StoredSession, error) {
	var st StoredSession
	path := "/apps/" + sidecarproc.AppName + "/users/" + url.PathEscape(sess.user) + "/sessions/" + url.PathEscape(sess.id)
	var lastErr error
	for _, r := range s.reps {
		status, body, err := s.do(ctx, http.MethodGet, s.url(r.idx)+path, nil, nil)
		if err == nil && status != http.StatusOK {
			err = fmt.Errorf("HTTP %d: %s", status, bytes.TrimSpace(body))
		}
		if err != nil {
			lastErr = err
			continue
		}
		var got struct {
			Events []sseEvent                 `json:"events"`
			State  map[string]json.RawMessage `json:"state"`
		}
		if err := json.Unmarshal(body, &got); err != nil {
			return st, fmt.Errorf("failed to decode session %s: %w", sess.id, err)
		}
		for _, ev := range got.Events {
			text, _ := ev.parts()
			se := StoredEvent{Text: text}
			if ev.Content != nil {
				for _, p := range ev.Content.Parts {
					if p.FunctionResponse != nil {
						se.FunctionResponses = append(se.FunctionResponses, p.FunctionResponse.ID)
					}
				}
			}
			if ev.UsageMetadata != nil {
				se.Usage = ev.UsageMetadata.TotalTokenCount
			}
			st.Events = append(st.Events, se)
		}
		st.UsageTotal, st.HasUsage = usageIn(got.State)
		return st, nil
	}
	return st, fmt.Errorf("failed to read session %s: %w", sess.id, lastErr)
}

// sidecarStats is the part of a replica's /stats the soak reads.
type sidecarStats struct {
	Sessions struct {
		InFlight int `json:"inFlight"`
	} `json:"sessions"`
	Tokens struct {
		Total int64 `json:"total"`
	} `json:"tokens"`
}

// stats reads the replica's /stats.
func (s *soak) stats(ctx context.Context, r *replica) (sidecarStats, error) {
	var st sidecarStats
	status, body, err := s.do(ctx, http.MethodGet, s.url(r.idx)+"/stats", nil, nil)
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("HTTP %d", status)
	}
	if err == nil {
		err = json.Unmarshal(body, &st)
	}
	if err != nil {
		return st, fmt.Errorf("failed to read replica %d's stats: %w", r.idx, err)
	}
	return st, nil
}

// agentTotal is the sum of the replicas' token totals.
func (s *soak) agentTotal(ctx context.Context) (int64, error) {
	var total int64
	for _, r := range s.reps {
		st, err := s.stats(ctx, r)
		if err != nil {
			return 0, err
		}
		total += st.Tokens.Total
	}
	return total, nil
}

// retryPause is how long a client waits before sending a request again
// that was not served: its connection was refused (the replica is down),
// or the sidecar answered 503 (draining, or the session's owner did not
// answer), as a client behind the agent's Service would.
const retryPause = 200 * time.Millisecond

// notServed tells whether a request failed before any sidecar took it.
func notServed(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// do sends a request with the sidecars' token, again while it is not
// served (notServed, 503) until ctx ends; with stream, the response (when
// 200) is handed to it instead of being read.
func (s *soak) do(ctx context.Context, method, u string, header map[string]string, body any, stream ...func(*http.Response) error) (int, []byte, error) {
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return 0, nil, fmt.Errorf("failed to encode request body: %w", err)
		}
	}
	for {
		status, resp, err := s.doOnce(ctx, method, u, header, b, stream...)
		if !notServed(err) && status != http.StatusServiceUnavailable {
			return status, resp, err
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("HTTP %d: %s", status, bytes.TrimSpace(resp))
			}
			return 0, nil, fmt.Errorf("not served before the deadline: %w (%w)", err, ctx.Err())
		case <-time.After(retryPause):
		}
	}
}

func (s *soak) doOnce(ctx context.Context, method, u string, header map[string]string, body []byte, stream ...func(*http.Response) error) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+sidecarproc.Token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode == http.StatusOK && len(stream) > 0 {
		return resp.StatusCode, nil, stream[0](resp)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<22))
	return resp.StatusCode, b, err
}

// checkIntegrity copies the replica's SQLite files and runs PRAGMA
// integrity_check on each copy.
func (s *soak) checkIntegrity(r *replica, when string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	record := func(name, result string) {
		s.integrity[fmt.Sprintf("r%d #%d %s %s", r.idx, len(s.integrity), when, name)] = result
	}
	src := filepath.Join(r.dir, "data")
	tmp, err := os.MkdirTemp("", "soak-sqlite-")
	if err != nil {
		record("copy", err.Error())
		return
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	ents, err := os.ReadDir(src)
	if err != nil {
		record("copy", err.Error())
		return
	}
	for _, e := range ents {
		if err := copyFile(filepath.Join(src, e.Name()), filepath.Join(tmp, e.Name())); err != nil {
			record(e.Name(), err.Error())
			return
		}
	}
	for _, e := range ents {
		if filepath.Ext(e.Name()) != ".db" {
			continue
		}
		record(e.Name(), integrityCheck(filepath.Join(tmp, e.Name())))
	}
}

func integrityCheck(path string) string {
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		return err.Error()
	}
	defer func() { _ = db.Close() }()
	rows, err := db.Query("PRAGMA integrity_check")
	if err != nil {
		return err.Error()
	}
	defer func() { _ = rows.Close() }()
	var out []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return err.Error()
		}
		out = append(out, line)
	}
	if err := rows.Err(); err != nil {
		return err.Error()
	}
	return strings.Join(out, "; ")
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("failed to copy %s: %w", src, err)
	}
	return os.WriteFile(dst, b, 0o600)
}
