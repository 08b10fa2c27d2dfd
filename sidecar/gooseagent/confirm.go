package gooseagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/adk/model"
	"google.golang.org/adk/session"
	"google.golang.org/adk/tool/toolconfirmation"
	"google.golang.org/genai"

	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/internal/adkcompat"
	"github.com/adk2goose/goose-operator/sidecar/internal/waitgroup"
)

// ConfirmationFunctionName is the name of the function call that asks the
// ADK client to approve a goose tool call (adk-go's own HITL call name).
const ConfirmationFunctionName = toolconfirmation.FunctionCallName

// ErrConfirmationNotPending is wrapped by every *ConfirmationError.
var ErrConfirmationNotPending = errors.New("tool confirmation is not pending")

// ConfirmationError says why a function response cannot be applied.
type ConfirmationError struct {
	// ID is the function response id the client sent.
	ID string
	// Stale is true when ID was a confirmation of this session that is no
	// longer pending (answered, timed out, cancelled); false when it is unknown.
	Stale bool
	// Reason is how a stale confirmation ended.
	Reason string
	// Pending is the confirmation id the session does wait for, if any.
	Pending string
}

func (e *ConfirmationError) Error() string {
	var b strings.Builder
	if e.Stale {
		fmt.Fprintf(&b, "tool confirmation %q is no longer pending", e.ID)
		if e.Reason != "" {
			b.WriteString(": " + e.Reason)
		}
	} else {
		fmt.Fprintf(&b, "no tool confirmation %q in this session", e.ID)
	}
	switch {
	case e.Pending != "":
		fmt.Fprintf(&b, " (the session awaits %q)", e.Pending)
	case !e.Stale:
		// A confirmation asked before adk2goose restarted is not held any
		// more; the next message ends that tool call (acp settleResumedRun).
		b.WriteString(" (the session awaits none; a confirmation asked before adk2goose restarted is lost: send a new message)")
	default:
		b.WriteString(" (the session awaits none)")
	}
	return b.String()
}

func (e *ConfirmationError) Unwrap() error { return ErrConfirmationNotPending }

// pausedReply is a goose reply stopped at a tool approval, held between the
// ADK turn that asked and the one that answers. Whoever claims it from its
// sessionEntry (under gooseAgent.mu) owns it: a resuming turn, the timeout,
// a cancel or shutdown.
type pausedReply struct {
	reply        *replyStream
	gooseID      string
	confID       string // id of the adk_request_confirmation call
	approval     *goose.ApprovalRequest
	invocationID string
	// prev is the goose session's usage before the rest of the reply: the
	// totals before the paused turn plus what that turn already reported, so
	// the continuing turn only counts what follows.
	prev  *goose.Usage
	timer *time.Timer
	// askedAt is the confirmation event's timestamp; events recorded outside
	// a turn reuse it (see record).
	askedAt time.Time
	// wait is the goose.approval_wait span; tools the tool spans still open,
	// for the turn that continues the reply.
	wait  trace.Span
	tools map[string]trace.Span
}

// resolvedConfirmation remembers how a confirmation ended, so a late answer
// gets "no longer pending: timed out" rather than "unknown".
type resolvedConfirmation struct {
	id, reason string
}

// maxResolved bounds the per-session memory of ended confirmations.
const maxResolved = 16

// confirmationCall builds the adk_request_confirmation call for a goose
// approval request, shaped as adk-go's generateRequestConfirmationEvent does.
// Plain maps, not genai/toolconfirmation structs: they survive the session
// store's and the A2A task store's JSON copies unchanged.
func confirmationCall(id, gooseID string, ar *goose.ApprovalRequest) *genai.FunctionCall {
	args := argsMap(ar.Arguments)
	var prompt any
	if ar.Prompt != "" {
		prompt = ar.Prompt
	}
	return &genai.FunctionCall{
		ID:   id,
		Name: ConfirmationFunctionName,
		Args: map[string]any{
			"originalFunctionCall": map[string]any{"id": ar.ID, "name": ar.ToolName, "args": args},
			"toolConfirmation": map[string]any{
				"hint": confirmationHint(ar, args), "confirmed": false,
				// For programs: the answers confirmation.Parse takes as a
				// FunctionResponse for this call's id.
				"payload": map[string]any{
					"gooseSessionId": gooseID, "prompt": prompt,
					"answers": map[string]any{"allow": map[string]any{"confirmed": true}, "deny": map[string]any{"confirmed": false}},
				},
			},
		},
	}
}

// maxHintValue bounds one argument value in a confirmation hint.
const maxHintValue = 300

// confirmationHint tells the person asked what goose wants to run and how
// to allow it, in words: UIs show it as the question (the v1.7.0 web UI
// with a text box, whose yes/no confirmation.Parse reads).
func confirmationHint(ar *goose.ApprovalRequest, args map[string]any) string {
	var b strings.Builder
	if ar.Prompt != "" && ar.Prompt != ar.ToolName {
		b.WriteString(strings.TrimSpace(ar.Prompt) + "\n")
	}
	b.WriteString("goose wants to use " + toolTitle(ar.ToolName))
	keys := slices.Sorted(maps.Keys(args))
	if len(keys) > 0 {
		b.WriteString(":")
	}
	for _, k := range keys {
		v, ok := args[k].(string)
		if !ok {
			v = hintValue(args[k])
		}
		if r := []rune(v); len(r) > maxHintValue {
			v = string(r[:maxHintValue]) + "…"
		}
		b.WriteString("\n  " + k + ": " + v)
	}
	b.WriteString("\nReply yes to allow it this once, or no to refuse.")
	return b.String()
}

// hintValue shows a non-string argument as JSON, as goose sent it; should
// that fail (values decoded from JSON encode back), as Go prints it.
func hintValue(v any) string {
	j, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(j)
}

// toolTitle names a goose tool for people: goose calls extension tools
// "<extension>__<tool>".
func toolTitle(name string) string {
	if ext, tool, ok := strings.Cut(name, "__"); ok && ext != "" && tool != "" {
		return tool + " (" + ext + " extension)"
	}
	return name
}

// pending returns the entry's paused reply.
func (g *gooseAgent) pending(e *sessionEntry) *pausedReply {
	g.mu.Lock()
	defer g.mu.Unlock()
	return e.paused
}

// park makes p the session's pending confirmation and arms its timeout.
// false when the agent is closed: nothing may be held past shutdown.
func (g *gooseAgent) park(key SessionKey, e *sessionEntry, p *pausedReply) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	e.paused = p
	p.timer = time.AfterFunc(g.cfg.ConfirmationTimeout, func() { g.expire(key, e, p) })
	return true
}

// claim takes p from the entry if it is still pending there, and records
// why it ended in the same step: an answer that comes meanwhile is told
// that reason, never that the session forgot the confirmation.
func (g *gooseAgent) claim(e *sessionEntry, p *pausedReply, reason string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if p == nil || e.paused != p {
		return false
	}
	e.paused = nil
	// A timer already firing finds the entry empty and does nothing.
	p.timer.Stop()
	p.endWait("resolved")
	g.resolvedLocked(e, p.confID, reason)
	return true
}

// resolved records a later reason a claimed confirmation ended with; the
// newest is the one told.
func (g *gooseAgent) resolved(e *sessionEntry, id, reason string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.resolvedLocked(e, id, reason)
}

func (g *gooseAgent) resolvedLocked(e *sessionEntry, id, reason string) {
	e.resolved = append(e.resolved, resolvedConfirmation{id: id, reason: reason})
	if n := len(e.resolved); n > maxResolved {
		e.resolved = append(e.resolved[:0], e.resolved[n-maxResolved:]...)
	}
}

// notPending explains why id is not a pending confirmation of the entry.
func (g *gooseAgent) notPending(e *sessionEntry, id string) *ConfirmationError {
	g.mu.Lock()
	defer g.mu.Unlock()
	ce := &ConfirmationError{ID: id}
	if e != nil {
		if e.paused != nil {
			ce.Pending = e.paused.confID
		}
		for _, v := range slices.Backward(e.resolved) {
			if v.id == id {
				ce.Stale, ce.Reason = true, v.reason
				break
			}
		}
	}
	return ce
}

// expire is the confirmation timeout: deny the tool, stop the reply nobody
// waits for, and record why in the session.
func (g *gooseAgent) expire(key SessionKey, e *sessionEntry, p *pausedReply) {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return // Close handles what is still pending
	}
	g.wg.Add(1)
	g.mu.Unlock()
	defer g.wg.Done()
	// The entry lock keeps a new turn from prompting goose while the old
	// reply is still being wound down; a turn holding it has already
	// claimed p, so waiting here is bounded by that turn.
	if err := e.acquire(g.stop); err != nil {
		return
	}
	defer e.release()
	reason := fmt.Sprintf("timed out after %s without an answer; goose was told the tool call is denied", g.cfg.ConfirmationTimeout)
	if !g.claim(e, p, reason) {
		return
	}
	// Record before goose hears of the denial, so that whoever learns of it
	// from goose (or from the reply ending) already finds it in the history.
	g.record(key, p, abandonedEvent(session.NewEventWithContext(context.Background(), p.invocationID), g.cfg.Name, p, ErrorCodeConfirmationTimeout, reason))
	g.deny(key, p, ErrorCodeConfirmationTimeout, reason)
}

// abandon ends a claimed paused reply without a user answer: goose gets a
// denial (so its history shows the refusal) and the reply is cancelled. It
// returns the event that tells the session why; the caller emits it in its
// turn or records it with record.
func (g *gooseAgent) abandon(ev *session.Event, key SessionKey, p *pausedReply, code, reason string) *session.Event {
	g.deny(key, p, code, reason)
	return abandonedEvent(ev, g.cfg.Name, p, code, reason)
}

// deny tells goose a claimed paused reply's tool call is denied and cancels
// the reply.
func (g *gooseAgent) deny(key SessionKey, p *pausedReply, code, reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.UsageTimeout)
	defer cancel()
	if err := g.cfg.Backend.Approve(ctx, p.gooseID, p.approval.ID, goose.DenyOnce); err != nil {
		g.cfg.Logger.WarnContext(ctx, "failed to deny tool call", "adk_session", key.SessionID,
			"goose_session", p.gooseID, "tool_call", p.approval.ID, "error", err)
	}
	// Closing cancels the goose reply: ACP session/cancel, REST closes the stream.
	p.reply.close()
	g.cfg.Logger.InfoContext(ctx, "tool confirmation abandoned", "adk_session", key.SessionID,
		"goose_session", p.gooseID, "tool", p.approval.ToolName, "code", code, "reason", reason)
}

// record appends an event to a session outside any turn. The caller holds
// the entry lock, so no turn of this session is writing meanwhile.
func (g *gooseAgent) record(key SessionKey, p *pausedReply, ev *session.Event) {
	if g.cfg.SessionService == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.UsageTimeout)
	defer cancel()
	// A turn of this session may already have loaded it and appended its
	// user message (its runner then waits for the entry lock). adk-go's
	// database service rejects that runner's later writes as stale once
	// the stored update time passes what it holds, so the event is stamped
	// right after the confirmation call, not now: it sorts after the call
	// and stays behind such a user message (see adkcompat.StoredTime).
	// What remains is a runner that loaded the session but had not yet
	// appended its message while this write ran (about a millisecond).
	if !p.askedAt.IsZero() {
		ev.Timestamp = adkcompat.StoredTimeAfter(p.askedAt)
	}
	got, err := g.cfg.SessionService.Get(ctx, &session.GetRequest{AppName: key.AppName, UserID: key.UserID, SessionID: key.SessionID})
	if err == nil {
		err = g.cfg.SessionService.AppendEvent(ctx, got.Session, ev)
	}
	if err != nil {
		g.cfg.Logger.ErrorContext(ctx, "failed to record abandoned tool confirmation", "adk_session", key.SessionID, "error", err)
	}
}

// abandonedEvent is the history entry for a confirmation that ended without
// an answer: an error event, so UIs and A2A clients show it as such.
func abandonedEvent(ev *session.Event, author string, p *pausedReply, code, reason string) *session.Event {
	msg := fmt.Sprintf("tool call %s (%s) was not run: confirmation %s %s", p.approval.ToolName, p.approval.ID, p.confID, reason)
	ev.Author = author
	ev.LLMResponse = model.LLMResponse{
		Content:      &genai.Content{Role: genai.RoleModel, Parts: []*genai.Part{{Text: msg}}},
		ErrorCode:    code,
		ErrorMessage: msg,
		TurnComplete: true,
		FinishReason: genai.FinishReasonOther,
	}
	ev.CustomMetadata = map[string]any{"goose_confirmation": map[string]any{
		"id": p.confID, "toolCallId": p.approval.ID, "tool": p.approval.ToolName, "outcome": code,
	}}
	return ev
}

// Controller is the sidecar's handle on a goose agent's held state: pending
// tool confirmations and shutdown.
type Controller struct{ g *gooseAgent }

// CheckConfirmation returns nil when callID is the pending confirmation of
// the session, else a *ConfirmationError. It does not wait for a running
// turn, so an HTTP layer can reject a bad answer before it reaches the
// session history.
func (c *Controller) CheckConfirmation(key SessionKey, callID string) error {
	g := c.g
	g.mu.Lock()
	e := g.sessions[key]
	ok := e != nil && e.paused != nil && e.paused.confID == callID
	g.mu.Unlock()
	if ok {
		return nil
	}
	return g.notPending(e, callID)
}

// PendingConfirmation returns the id of the confirmation the session waits
// for, if any.
func (c *Controller) PendingConfirmation(key SessionKey) (string, bool) {
	g := c.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if e := g.sessions[key]; e != nil && e.paused != nil {
		return e.paused.confID, true
	}
	return "", false
}

// CancelConfirmation abandons the session's pending confirmation when its id
// is one of callIDs (e.g. the calls of an A2A task being cancelled): goose
// gets a denial and its reply is cancelled. It reports whether one was.
func (c *Controller) CancelConfirmation(ctx context.Context, key SessionKey, callIDs []string, reason string) bool {
	g := c.g
	g.mu.Lock()
	e := g.sessions[key]
	g.mu.Unlock()
	if e == nil {
		return false
	}
	if err := e.acquire(ctx); err != nil {
		return false
	}
	defer e.release()
	p := g.pending(e)
	if p == nil {
		return false
	}
	match := false
	for _, id := range callIDs {
		match = match || id == p.confID
	}
	if !match || !g.claim(e, p, reason) {
		return false
	}
	g.record(key, p, g.abandon(session.NewEventWithContext(context.Background(), p.invocationID), key, p, ErrorCodeCancelled, reason))
	return true
}

// Close denies and cancels every pending confirmation (goose sees the
// denial and the cancel), records why in each session, and refuses to hold
// new ones. Later turns that hit an approval end with an error. Then it
// deletes from goose the sessions it started early
// (Config.StartGooseOnCreate) for ADK sessions that ran no turn: no ADK
// state names them, so nothing could reach them after this process. Starts
// still in flight get a few seconds to finish first. Call it while goose
// still runs (the sidecar does as it drains before goose stops).
func (c *Controller) Close(ctx context.Context) error {
	g := c.g
	g.mu.Lock()
	if !g.closed {
		g.closed = true
		g.cancelStop()
	}
	type held struct {
		key SessionKey
		e   *sessionEntry
	}
	var hs []held
	for k, e := range g.sessions {
		if e.paused != nil {
			hs = append(hs, held{k, e})
		}
	}
	g.mu.Unlock()
	var errs []error
	for _, h := range hs {
		// A turn holding the entry lock has claimed the reply itself and
		// ends it when its request ends.
		if err := h.e.acquire(ctx); err != nil {
			errs = append(errs, fmt.Errorf("failed to cancel tool confirmation of session %q: %w", h.key.SessionID, err))
			continue
		}
		const reason = "cancelled because adk2goose is shutting down"
		if p := g.pending(h.e); p != nil && g.claim(h.e, p, reason) {
			ev := g.abandon(session.NewEventWithContext(context.Background(), p.invocationID), h.key, p, ErrorCodeCancelled, reason)
			g.record(h.key, p, ev)
		}
		h.e.release()
	}
	if err := waitgroup.Wait(ctx, &g.wg); err != nil {
		errs = append(errs, fmt.Errorf("failed to wait for confirmation timeouts: %w", err))
	}
	grace, cancel := context.WithTimeout(ctx, earlyStartGrace)
	_ = waitgroup.Wait(grace, &g.starts) // past the grace, they are cancelled
	cancel()
	g.cancelStarts()
	if err := waitgroup.Wait(ctx, &g.starts); err != nil {
		errs = append(errs, fmt.Errorf("failed to wait for early goose session starts: %w", err))
	}
	errs = append(errs, g.deleteUnusedEarly(ctx))
	return errors.Join(errs...)
}
