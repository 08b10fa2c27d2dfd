package gooseagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"strings"
	"time"

	"google.golang.org/adk/agent"
	"google.golang.org/adk/model"
	"google.golang.org/adk/session"
	"google.golang.org/genai"

	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/gooseagent/confirmation"
	"github.com/adk2goose/goose-operator/sidecar/gooseagent/internal/userinput"
	"github.com/adk2goose/goose-operator/sidecar/internal/adkcompat"
)

// turn translates one goose reply into ADK events.
type turn struct {
	g         *gooseAgent
	ic        agent.InvocationContext
	yield     func(*session.Event, error) bool
	key       SessionKey
	streaming bool

	start      time.Time
	firstEvent time.Duration
	events     int
	stopped    bool // yield returned false: the consumer is gone

	gooseID    string
	workingDir string         // from Config.Workspaces; empty: StartOptions'
	stateDelta map[string]any // pending, attached to the next non-partial event

	text, thought strings.Builder
	usage         goose.Usage  // sum of goose's per-call usage seen in this turn
	accumulated   *goose.Usage // the goose session's totals, once known
	prev          *goose.Usage // the totals before this turn, when known
	entry         *sessionEntry
	reachedGoose  bool
	errorCode     string
	// paused: the turn ended at a tool approval whose reply is now held.
	paused bool
	spans  turnSpans
	// live is the live session the turn is one of; nil for Run.
	live *liveSession
}

func newTurn(g *gooseAgent, ic agent.InvocationContext, yield func(*session.Event, error) bool) *turn {
	s := ic.Session()
	streaming := false
	if rc := ic.RunConfig(); rc != nil {
		streaming = rc.StreamingMode == agent.StreamingModeSSE
	}
	return &turn{
		g: g, ic: ic, yield: yield,
		key:        SessionKey{AppName: s.AppName(), UserID: s.UserID(), SessionID: s.ID()},
		streaming:  streaming,
		start:      time.Now(),
		stateDelta: map[string]any{},
	}
}

func (t *turn) run() {
	if obs := t.g.cfg.Observer; obs != nil {
		obs.TurnStarted(t.key)
		defer func() {
			obs.TurnFinished(t.key, TurnResult{
				GooseSessionID: t.gooseID, Usage: t.turnUsage(), ErrorCode: t.errorCode,
				FirstEvent: t.firstEvent, Duration: time.Since(t.start), Events: t.events,
				AwaitingConfirmation: t.paused,
			})
		}()
	}

	entry := t.g.entry(t.key)
	defer t.g.unuse(entry)
	t.entry = entry
	if err := entry.acquire(t.ic); err != nil {
		t.errorCode = ErrorCodeCancelled
		return // the caller went away while another turn held the session
	}
	defer entry.release()

	if ws := t.g.cfg.Workspaces; ws != nil {
		dir, release, err := ws.Open(t.ic, t.key.UserID, t.key.SessionID)
		if err != nil {
			t.finish("", fmt.Errorf("failed to prepare working directory: %w", err))
			return
		}
		defer release()
		t.workingDir = dir
	}

	in := userinput.Parse(t.ic.UserContent())
	if len(in.Answers) > 0 {
		t.answer(in.Answers)
		return
	}
	if in.Text == "" {
		t.finish("", fmt.Errorf("failed to read user message: %w", errNoText))
		return
	}
	// goose runs one reply per session: a new message supersedes a reply
	// still waiting for a confirmation, which is denied and cancelled first.
	const superseded = "superseded by a new user message; goose was told the tool call is denied"
	if p := t.g.pending(entry); p != nil && t.g.claim(entry, p, superseded) {
		ev := t.newEvent(nil)
		t.g.abandon(ev, t.key, p, ErrorCodeCancelled, superseded)
		// Only a note of why: the turn's outcome is the new reply's, and an
		// error code here would fail the whole A2A task.
		ev.TurnComplete, ev.ErrorCode, ev.ErrorMessage, ev.FinishReason = false, "", "", ""
		if !t.emit(ev) {
			return
		}
	}
	if err := t.traceSession(func() error { return t.openSession(entry) }); err != nil {
		t.finish("", fmt.Errorf("failed to open goose session: %w", err))
		return
	}

	t.reachedGoose = true
	defer t.recordUsage()
	t.startPrompt()
	defer t.endPrompt()
	// The prompt span's context reaches goose (ACP _meta traceparent).
	t.pump(openReply(t.spans.promptCtx, t.g.cfg.Backend, t.gooseID, goose.UserMessage{Text: in.Text}))
}

// answer applies the user's confirmation and continues the paused reply.
func (t *turn) answer(answers []userinput.Answer) {
	p := t.g.pending(t.entry)
	var ans *userinput.Answer
	for i := range answers {
		if p != nil && answers[i].ID == p.confID {
			ans = &answers[i]
		}
	}
	if ans == nil {
		t.finish("", fmt.Errorf("failed to apply tool confirmation: %w", t.g.notPending(t.entry, answers[0].ID)))
		return
	}
	confirmed, err := confirmation.Parse(ans.Response)
	if err != nil {
		// The confirmation stays pending: the client can answer again.
		t.finish("", fmt.Errorf("failed to apply tool confirmation %q: %w", ans.ID, err))
		return
	}
	decision := goose.DenyOnce
	if confirmed {
		decision = goose.AllowOnce
	}
	t.resumeFrom(p, decision)
	if !t.g.claim(t.entry, p, "already answered ("+string(decision)+")") {
		// The timeout won the race since pending() looked.
		t.finish("", fmt.Errorf("failed to apply tool confirmation: %w", t.g.notPending(t.entry, ans.ID)))
		return
	}
	t.gooseID, t.prev, t.reachedGoose = p.gooseID, p.prev, true
	defer t.recordUsage()
	t.startPrompt()
	defer t.endPrompt()
	p.reply.attach(t.ic)
	if err := t.g.cfg.Backend.Approve(t.ic, p.gooseID, p.approval.ID, decision); err != nil {
		p.reply.close()
		t.g.resolved(t.entry, p.confID, "goose did not take the answer")
		t.finish("", fmt.Errorf("failed to answer goose tool approval: %w", err))
		return
	}
	t.g.cfg.Logger.InfoContext(t.ic, "tool confirmation answered", "adk_session", t.key.SessionID,
		"goose_session", p.gooseID, "tool", p.approval.ToolName, "decision", decision)
	t.pump(p.reply)
}

// pump streams a goose reply into this turn until it finishes, fails, or
// pauses at a tool approval (then the reply is held, not closed).
func (t *turn) pump(reply *replyStream) {
	held := false
	defer func() {
		if !held {
			reply.close()
		}
	}()
	for {
		ev, err, ok := reply.next()
		if !ok {
			t.finish("", goose.ErrStreamBroken)
			return
		}
		if err != nil {
			t.finish("", fmt.Errorf("failed to stream goose reply: %w", err))
			return
		}
		switch e := ev.(type) {
		case *goose.Finish:
			t.finish(e.Reason, nil)
			return
		case *goose.ApprovalRequest:
			held = t.pause(reply, e)
			return
		}
		if !t.handle(ev) {
			return
		}
	}
}

// pause ends the turn with an adk_request_confirmation call for goose's
// approval request and holds the reply for the turn that answers. It
// returns false when the reply cannot be held (client gone, shutting down)
// and must be closed.
func (t *turn) pause(reply *replyStream, ar *goose.ApprovalRequest) bool {
	if t.ic.Err() != nil {
		t.finish("", context.Cause(t.ic))
		return false
	}
	confID := adkcompat.NewFunctionCallID()
	parts := t.takeText()
	parts = append(parts, &genai.Part{FunctionCall: confirmationCall(confID, t.gooseID, ar)})
	ev := t.newEvent(&genai.Content{Role: genai.RoleModel, Parts: parts})
	ev.LongRunningToolIDs = []string{confID}
	// Whole microseconds, the database's precision: events recorded outside
	// a turn are stamped relative to it (see gooseAgent.record).
	ev.Timestamp = adkcompat.StoredTime(ev.Timestamp)
	ev.TurnComplete = true
	ev.UsageMetadata = usageMetadata(t.usage)

	p := &pausedReply{reply: reply, gooseID: t.gooseID, confID: confID, approval: ar, invocationID: t.ic.InvocationID(), askedAt: ev.Timestamp}
	if t.prev != nil {
		prev := t.prev.Add(t.usage)
		p.prev = &prev
	}
	// Held before the client sees the call, so an immediate answer finds it;
	// detached so the end of this request does not cancel goose.
	reply.detach()
	t.startApprovalWait(p, ar)
	if !t.g.park(t.key, t.entry, p) {
		p.endWait("not held: shutting down")
		t.finish("", fmt.Errorf("failed to hold tool approval for %q: %w", ar.ToolName, errShuttingDown))
		return false
	}
	t.paused = true
	if !t.emit(ev) {
		// Nobody received the call: nobody can answer it.
		t.paused = false
		if !t.g.claim(t.entry, p, "the client did not receive it") {
			return true // Close took it meanwhile and ends the reply itself
		}
		return false
	}
	t.g.cfg.Logger.InfoContext(t.ic, "awaiting tool confirmation", "adk_session", t.key.SessionID,
		"goose_session", t.gooseID, "tool", ar.ToolName, "confirmation", confID)
	return true
}

var errShuttingDown = errors.New("adk2goose is shutting down")

// openSession finds or creates the goose session and makes it ready.
func (t *turn) openSession(e *sessionEntry) error {
	// This turn's first non-partial event names the goose session in the
	// ADK state (stateDelta below).
	t.g.mu.Lock()
	early := e.unusedEarly
	e.unusedEarly = false
	t.g.mu.Unlock()
	if es := t.g.cfg.EarlySessions; early && es != nil {
		// Unlisted before the turn uses it: a listed session is deleted by
		// the next process should this one die.
		if err := es.RemoveEarly(t.ic, e.gooseID); err != nil {
			t.g.mu.Lock()
			e.unusedEarly = true
			t.g.mu.Unlock()
			return fmt.Errorf("failed to take the goose session started early: %w", err)
		}
	}
	b := t.g.cfg.Backend
	sess := t.ic.Session()
	id, legacy := t.g.storedGooseID(sess)
	if legacy {
		// Carry the session over to this agent's own key.
		t.stateDelta[SessionIDStateKey(t.g.cfg.Name)] = id
	}
	if id != "" && id != e.gooseID {
		e.gooseID, e.ready = id, false
	}
	if e.gooseID != "" && !e.ready {
		var err error
		if r, ok := b.(goose.WorkingDirResumer); ok && t.workingDir != "" {
			// The session follows the workspace layout (a changed scope, a
			// lost directory) rather than fail on the one goose recorded.
			_, err = r.ResumeSessionIn(t.ic, e.gooseID, t.workingDir)
		} else {
			_, err = b.ResumeSession(t.ic, e.gooseID)
		}
		switch {
		case errors.Is(err, goose.ErrSessionNotFound):
			// goose lost its history (e.g. a wiped volume): start over rather than fail forever.
			t.g.cfg.Logger.WarnContext(t.ic, "goose session vanished, starting a new one",
				"adk_session", t.key.SessionID, "goose_session", e.gooseID)
			e.gooseID = ""
		case err != nil:
			return fmt.Errorf("failed to resume goose session: %w", err)
		default:
			e.ready = true
		}
	}
	switch {
	case e.gooseID != "" && e.totals != nil:
		prev := *e.totals
		t.prev = &prev
	case e.gooseID != "":
		prev, ok := usageFromState(sess.State(), UsageStateKey(t.g.cfg.Name))
		if !ok && legacy {
			prev, ok = usageFromState(sess.State(), StateKeyUsage)
		}
		if ok {
			t.prev = &prev
		}
	}
	if e.gooseID == "" {
		opts := t.g.cfg.StartOptions
		if t.workingDir != "" {
			opts.WorkingDir = t.workingDir
		}
		s, err := b.StartSession(t.ic, opts)
		if err != nil {
			return fmt.Errorf("failed to start goose session: %w", err)
		}
		e.gooseID, e.ready = s.ID, true
		t.prev = &goose.Usage{}
		t.g.cfg.Logger.InfoContext(t.ic, "started goose session",
			"adk_session", t.key.SessionID, "goose_session", s.ID, "working_dir", opts.WorkingDir)
	}
	if e.gooseID != id {
		// A session started now, started early (StartGooseOnCreate), or
		// started again after goose lost the one the state named.
		t.stateDelta[SessionIDStateKey(t.g.cfg.Name)] = e.gooseID
	}
	t.gooseID = e.gooseID
	return nil
}

// handle translates one non-final goose event. It returns false when the
// consumer stopped.
func (t *turn) handle(ev goose.Event) bool {
	switch e := ev.(type) {
	case *goose.TextDelta:
		t.text.WriteString(e.Text)
		if t.streaming && e.Text != "" {
			return t.emitPartial(&genai.Part{Text: e.Text}, nil)
		}
	case *goose.ThinkingDelta:
		t.thought.WriteString(e.Text)
		if t.streaming && e.Text != "" {
			return t.emitPartial(&genai.Part{Text: e.Text, Thought: true}, nil)
		}
	case *goose.ToolRequest:
		t.toolStarted(e)
		parts := t.takeText()
		parts = append(parts, &genai.Part{FunctionCall: &genai.FunctionCall{
			ID: e.ID, Name: e.Name, Args: argsMap(e.Arguments),
		}})
		return t.emit(t.newEvent(&genai.Content{Role: genai.RoleModel, Parts: parts}))
	case *goose.ToolResponse:
		t.toolFinished(e)
		ev := t.newEvent(&genai.Content{Role: genai.RoleUser, Parts: []*genai.Part{{
			FunctionResponse: &genai.FunctionResponse{ID: e.ID, Name: e.Name, Response: responseMap(e)},
		}}})
		// ADK authors function responses with the agent's name, not "user".
		ev.Author = t.g.cfg.Name
		return t.emit(ev)
	case *goose.Notification:
		if t.streaming {
			return t.emitPartial(&genai.Part{Text: notificationText(e), Thought: true},
				map[string]any{"goose_notification": notificationMeta(e)})
		}
	case *goose.UsageUpdate:
		// Updates that only carry accumulated figures (ACP's usage_update
		// notification) have no per-call input/output; do not count them.
		if e.Last.HasSplit() {
			t.usage = t.usage.Add(e.Last)
		}
		if e.HasAccumulated {
			acc := e.Accumulated
			t.accumulated = &acc
		}
	}
	return true
}

// finish emits the turn's one non-partial aggregate: the remaining text, this
// turn's usage, a finish reason and, on failure, the error.
func (t *turn) finish(reason string, err error) {
	if t.stopped {
		return
	}
	if err == nil && t.ic.Err() != nil {
		err = context.Cause(t.ic)
	}
	if err == nil && reason == goose.FinishCancelled {
		err = errCancelledInGoose
	}
	if err != nil && t.ic.Err() != nil {
		cause := context.Cause(t.ic)
		if t.live == nil || !t.live.reports(cause) {
			// The client is gone: the runner could not persist the event anyway.
			t.errorCode = ErrorCodeCancelled
			return
		}
		// A live client stopped the turn, or its server ended it, and the
		// stream is still there to say so.
		err = cause
	}
	parts := t.takeText()
	ev := t.newEvent(&genai.Content{Role: genai.RoleModel, Parts: parts})
	ev.TurnComplete = true
	ev.FinishReason = finishReason(reason, err)
	if t.reachedGoose {
		ev.Actions.StateDelta[UsageStateKey(t.g.cfg.Name)] = usageState(t.fetchTotals())
	}
	ev.UsageMetadata = usageMetadata(t.turnUsage())
	if err != nil {
		t.errorCode = errorCode(err)
		ev.ErrorCode = t.errorCode
		ev.ErrorMessage = err.Error()
		t.g.cfg.Logger.WarnContext(t.ic, "goose turn failed",
			"adk_session", t.key.SessionID, "goose_session", t.gooseID, "code", t.errorCode, "error", err)
	}
	t.emit(ev)
}

// fetchTotals settles the session's accumulated usage once per turn and
// returns it: goose's own counters when the stream carried them, else what
// Backend.Usage answers (a call to goose), else previous + this turn. It
// sets t.accumulated and caches the totals on the session entry.
func (t *turn) fetchTotals() goose.Usage {
	if t.accumulated == nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ic), t.g.cfg.UsageTimeout)
		defer cancel()
		acc, err := t.g.cfg.Backend.Usage(ctx, t.gooseID)
		if err != nil {
			var prev goose.Usage
			if t.prev != nil {
				prev = *t.prev
			}
			acc = prev.Add(t.usage)
		}
		t.accumulated = &acc
	}
	t.rememberTotals()
	return *t.accumulated
}

// rememberTotals caches the totals on the session entry for the next turn
// of this session, which needs them to work out its own usage even if this
// turn's state delta never reached the session store (client gone).
func (t *turn) rememberTotals() {
	if t.entry != nil && t.accumulated != nil {
		acc := *t.accumulated
		t.entry.totals = &acc
	}
}

// turnUsage is this turn's tokens: the growth of goose's accumulated totals
// when both ends are known (robust against goose repeating an earlier
// per-call figure), otherwise the sum of the per-call figures.
func (t *turn) turnUsage() goose.Usage {
	if t.accumulated != nil && t.prev != nil {
		return t.accumulated.Since(*t.prev)
	}
	return t.usage
}

func (t *turn) recordUsage() {
	// A paused reply's usage is recorded by the turn that finishes it.
	if t.g.cfg.Store == nil || t.gooseID == "" || t.paused {
		return
	}
	totals := t.fetchTotals()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ic), t.g.cfg.UsageTimeout)
	defer cancel()
	err := t.g.cfg.Store.RecordUsage(ctx, UsageRecord{
		Key: t.key, Agent: t.g.cfg.Name, GooseSessionID: t.gooseID, Turn: t.turnUsage(), Totals: totals, At: time.Now(),
	})
	if err != nil {
		t.g.cfg.Logger.ErrorContext(ctx, "failed to record token usage",
			"adk_session", t.key.SessionID, "error", err)
	}
}

// takeText returns the aggregated thought and text parts and resets them.
func (t *turn) takeText() []*genai.Part {
	var parts []*genai.Part
	if t.thought.Len() > 0 {
		parts = append(parts, &genai.Part{Text: t.thought.String(), Thought: true})
		t.thought.Reset()
	}
	if t.text.Len() > 0 {
		parts = append(parts, &genai.Part{Text: t.text.String()})
		t.text.Reset()
	}
	return parts
}

func (t *turn) newEvent(c *genai.Content) *session.Event {
	ev := session.NewEventWithContext(t.ic, t.ic.InvocationID())
	ev.Author = t.g.cfg.Name
	ev.Branch = t.ic.Branch()
	ev.LLMResponse = model.LLMResponse{Content: c}
	return ev
}

func (t *turn) emitPartial(p *genai.Part, meta map[string]any) bool {
	ev := t.newEvent(&genai.Content{Role: genai.RoleModel, Parts: []*genai.Part{p}})
	ev.Partial = true
	ev.CustomMetadata = meta
	return t.emit(ev)
}

// emit yields an event; non-partial events carry the pending state delta
// (partial events are not persisted, so their delta would be lost).
func (t *turn) emit(ev *session.Event) bool {
	if t.stopped {
		return false
	}
	if !ev.Partial && len(t.stateDelta) > 0 {
		maps.Copy(ev.Actions.StateDelta, t.stateDelta)
		clear(t.stateDelta)
	}
	if t.events == 0 {
		now := time.Now()
		t.firstEvent = now.Sub(t.start)
		t.traceFirstEvent(now)
	}
	t.events++
	if !t.yield(ev, nil) {
		t.stopped = true
		return false
	}
	return true
}

var errNoText = errors.New("the message has no text part (goose accepts text)")

// errCancelledInGoose ends a turn whose reply goose ended "cancelled" though
// the turn asked for nothing: another client of the goose session cancelled
// it (goose shares a session's run across its connections). What goose said
// so far is not an answer.
var errCancelledInGoose = fmt.Errorf("goose cancelled the turn: another client of the goose session stopped it: %w", context.Canceled)

func errorCode(err error) string {
	var ae *goose.AgentError
	var coded interface{ ErrorCode() string }
	switch {
	case errors.As(err, &coded):
		return coded.ErrorCode()
	case errors.Is(err, errNoText), errors.Is(err, confirmation.ErrInvalid):
		return ErrorCodeBadRequest
	case errors.Is(err, ErrConfirmationNotPending):
		return ErrorCodeConfirmationNotPending
	case errors.Is(err, errShuttingDown):
		return ErrorCodeUnavailable
	case errors.As(err, &ae):
		return ErrorCodeAgent
	case errors.Is(err, goose.ErrUnavailable):
		return ErrorCodeUnavailable
	case errors.Is(err, goose.ErrUnauthorized):
		return ErrorCodeUnauthorized
	case errors.Is(err, goose.ErrNotReady):
		return ErrorCodeNotReady
	case errors.Is(err, goose.ErrRateLimited):
		return ErrorCodeRateLimited
	case errors.Is(err, goose.ErrStreamBroken):
		return ErrorCodeStreamBroken
	case errors.Is(err, goose.ErrMessageTooLarge):
		// A user message over the goose client's cap (an oversized message
		// from goose broke the stream and is reported as that, above).
		return ErrorCodeBadRequest
	case errors.Is(err, goose.ErrUnsupported):
		return ErrorCodeUnsupported
	case errors.Is(err, context.DeadlineExceeded):
		return ErrorCodeTimeout
	case errors.Is(err, context.Canceled):
		return ErrorCodeCancelled
	}
	var he *goose.HTTPError
	if errors.As(err, &he) && he.StatusCode >= 500 {
		return ErrorCodeUnavailable
	}
	return ErrorCodeInternal
}

func finishReason(reason string, err error) genai.FinishReason {
	if err != nil {
		return genai.FinishReasonOther
	}
	switch reason {
	case "end_turn", "stop", "":
		return genai.FinishReasonStop
	case "max_tokens":
		return genai.FinishReasonMaxTokens
	default: // goose.FinishCancelled and anything new
		return genai.FinishReasonOther
	}
}

func usageMetadata(u goose.Usage) *genai.GenerateContentResponseUsageMetadata {
	return &genai.GenerateContentResponseUsageMetadata{
		PromptTokenCount:     clamp32(u.InputTokens),
		CandidatesTokenCount: clamp32(u.OutputTokens),
		TotalTokenCount:      clamp32(u.Total()),
	}
}

func clamp32(n int64) int32 {
	return int32(max(0, min(n, math.MaxInt32)))
}

// usageState is the form UsageStateKey holds, read back by usageFromState.
func usageState(u goose.Usage) map[string]any {
	return map[string]any{"inputTokens": u.InputTokens, "outputTokens": u.OutputTokens, "totalTokens": u.Total()}
}

// usageFromState reads a usage state key; values may be int64 (in memory)
// or float64 (after a JSON round trip through the database).
func usageFromState(st session.State, key string) (goose.Usage, bool) {
	v, err := st.Get(key)
	if err != nil {
		return goose.Usage{}, false
	}
	m, ok := v.(map[string]any)
	if !ok {
		return goose.Usage{}, false
	}
	return goose.Usage{InputTokens: toInt64(m["inputTokens"]), OutputTokens: toInt64(m["outputTokens"]), TotalTokens: toInt64(m["totalTokens"])}, true
}

func toInt64(v any) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case int:
		return int64(n)
	case int32:
		return int64(n)
	case float64:
		return int64(n)
	case json.Number:
		i, _ := n.Int64()
		return i
	}
	return 0
}

// storedGooseID is the goose session id the ADK session's state names for
// this agent; legacy is true when it comes from the unscoped key of older
// versions, which counts only if this agent wrote it.
func (g *gooseAgent) storedGooseID(s session.Session) (id string, legacy bool) {
	if id := stateString(s.State(), SessionIDStateKey(g.cfg.Name)); id != "" {
		return id, false
	}
	if id = stateString(s.State(), StateKeySessionID); id == "" || !g.wroteLegacyKey(s.Events()) {
		return "", false
	}
	return id, true
}

// wroteLegacyKey reports whether the last event that set the unscoped
// session id key is this agent's.
func (g *gooseAgent) wroteLegacyKey(evs session.Events) bool {
	if evs == nil {
		return false
	}
	for i := evs.Len() - 1; i >= 0; i-- {
		if ev := evs.At(i); ev != nil {
			if _, ok := ev.Actions.StateDelta[StateKeySessionID]; ok {
				return ev.Author == g.cfg.Name
			}
		}
	}
	return false
}

func stateString(st session.State, key string) string {
	v, err := st.Get(key)
	if err != nil {
		return ""
	}
	s, _ := v.(string)
	return s
}

// argsMap turns goose's JSON arguments into FunctionCall.Args, which must be
// an object; anything else is wrapped so that no information is dropped.
func argsMap(raw json.RawMessage) map[string]any {
	if len(raw) == 0 {
		return map[string]any{}
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err == nil && m != nil {
		return m
	}
	var v any
	if err := json.Unmarshal(raw, &v); err == nil {
		return map[string]any{"value": v}
	}
	return map[string]any{"raw": string(raw)}
}

// responseMap follows ADK's convention for tool results: {"output": …} or
// {"error": …}, plus goose's structured content when present.
func responseMap(r *goose.ToolResponse) map[string]any {
	m := map[string]any{}
	if r.IsError {
		m["error"] = r.Text
	} else {
		m["output"] = r.Text
	}
	if len(r.Structured) > 0 {
		var v any
		if err := json.Unmarshal(r.Structured, &v); err == nil {
			m["structured"] = v
		}
	}
	return m
}

func notificationText(n *goose.Notification) string {
	var b strings.Builder
	b.WriteString("[")
	if n.Kind != "" {
		b.WriteString(n.Kind)
	} else {
		b.WriteString("progress")
	}
	if n.Progress != nil {
		if n.Total != nil && *n.Total > 0 {
			fmt.Fprintf(&b, " %g/%g", *n.Progress, *n.Total)
		} else {
			fmt.Fprintf(&b, " %g", *n.Progress)
		}
	}
	b.WriteString("] ")
	b.WriteString(n.Message)
	return b.String()
}

func notificationMeta(n *goose.Notification) map[string]any {
	m := map[string]any{"kind": n.Kind, "message": n.Message}
	if n.ToolCallID != "" {
		m["toolCallId"] = n.ToolCallID
	}
	if n.Progress != nil {
		m["progress"] = *n.Progress
	}
	if n.Total != nil {
		m["total"] = *n.Total
	}
	return m
}
