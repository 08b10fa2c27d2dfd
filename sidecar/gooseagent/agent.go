// Package gooseagent makes a goose server look like an ADK agent.
//
// New returns an [agent.Agent] (built with agent.New, as adk-go requires for
// custom agents) whose Run sends the user's text to goose through a
// [goose.Backend] and translates goose's reply stream into ADK session events:
//
//   - text deltas become partial events (only in SSE streaming mode), and every
//     turn ends with exactly one non-partial aggregate event carrying the full
//     text, UsageMetadata (this turn's tokens), FinishReason and TurnComplete;
//   - thinking becomes thought parts;
//   - a goose tool request becomes a functionCall part (together with the text
//     that preceded it, as Gemini does), a tool response becomes a
//     functionResponse part;
//   - goose errors become ErrorCode/ErrorMessage on the final event, never an
//     iterator error, so /run keeps the turn and A2A reports a FAILED task;
//   - progress notifications become partial events with a thought part, which
//     UIs show as transient reasoning and which are not persisted;
//   - a goose tool approval request (approve / smart_approve mode) ends the
//     turn with adk-go's human-in-the-loop shape: a functionCall named
//     adk_request_confirmation (id "adk-<uuid>", listed in
//     LongRunningToolIDs) whose args are originalFunctionCall {id, name,
//     args} of goose's tool and toolConfirmation {hint, confirmed: false,
//     payload}.
//
// Tool approvals. The goose reply stays open across the two ADK turns: its
// pull iterator and context are parked on the session (pausedReply),
// detached from the request that asked. The next user message of the session
// that carries a functionResponse for the confirmation id, with
// {"confirmed": bool} or the web UI's {"response": "<JSON or yes/no>"} (see
// confirmation.Parse), answers goose (allow_once / deny_once) and the same
// reply continues into that turn. A functionResponse for any other id ends
// the turn with ErrorCodeConfirmationNotPending and leaves the pending one
// alone. A plain new message supersedes the pending confirmation. The
// confirmation is denied and the reply cancelled when
// Config.ConfirmationTimeout passes (ErrorCodeConfirmationTimeout), on
// Controller.CancelConfirmation and on Controller.Close; those record an
// error event in the session (Config.SessionService) saying why.
//
// Sessions. For each goose agent, the ADK session maps to one goose session,
// created on first use. Its id is kept in ADK session state under
// [SessionIDStateKey](agent name) and its accumulated token totals under
// [UsageStateKey](agent name), so several goose agents of one agent tree
// (under a sequentialagent, say) share an ADK session without sharing a goose
// conversation. Both are written through the StateDelta of a non-partial
// event so that a durable session service persists them. A [UsageStore] may
// additionally record the totals somewhere queryable. Deleting an ADK
// session through [Controller.SessionService] (or calling
// [Controller.DeleteSession]) deletes its goose session too, so the same id
// created again starts afresh; sessions idle beyond Config.IdleSessions are
// forgotten in memory and resumed from their state when used again.
//
// See the package examples for a program to copy: goose as the root agent,
// and two goose agents in a workflow.
package gooseagent

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/adk/agent"
	"google.golang.org/adk/session"

	"github.com/adk2goose/goose-operator/sidecar/goose"
)

// ADK session-state keys. They carry no app:/user:/temp: prefix, so they
// are scoped to one ADK session; the agent's name scopes them to one agent,
// so several goose agents can share an ADK session (say under a
// sequentialagent) each with its own goose session.
const (
	// StateKeySessionID prefixes the key holding an agent's goose session id
	// (string), see SessionIDStateKey. Alone, it is the key versions before
	// the scoping wrote; an agent still reads it when it finds no scoped key
	// and it wrote that key itself (the event that set it is its own).
	StateKeySessionID = "goose:session_id"
	// StateKeyUsage prefixes the key holding the agent's goose session's
	// accumulated token totals, see UsageStateKey; alone, the older key.
	StateKeyUsage = "goose:usage"
)

// SessionIDStateKey is the ADK session-state key under which the agent
// named agentName keeps its goose session id: "goose:session_id:<name>".
func SessionIDStateKey(agentName string) string { return StateKeySessionID + ":" + agentName }

// UsageStateKey is the ADK session-state key under which the agent named
// agentName keeps its goose session's token totals as an object
// {"inputTokens":n,"outputTokens":n,"totalTokens":n}: "goose:usage:<name>".
func UsageStateKey(agentName string) string { return StateKeyUsage + ":" + agentName }

// Error codes set on session.Event.ErrorCode.
const (
	ErrorCodeAgent        = "GOOSE_AGENT_ERROR" // goose reported an error for the reply
	ErrorCodeUnavailable  = "GOOSE_UNAVAILABLE" // goose cannot be reached
	ErrorCodeUnauthorized = "GOOSE_UNAUTHORIZED"
	ErrorCodeNotReady     = "GOOSE_NOT_READY"
	ErrorCodeRateLimited  = "GOOSE_RATE_LIMITED"
	ErrorCodeStreamBroken = "GOOSE_STREAM_BROKEN" // the reply stream ended before goose finished it
	ErrorCodeBadRequest   = "GOOSE_BAD_REQUEST"   // the ADK message cannot be sent to goose
	ErrorCodeUnsupported  = "GOOSE_UNSUPPORTED"
	ErrorCodeTimeout      = "GOOSE_TIMEOUT"
	ErrorCodeCancelled    = "GOOSE_CANCELLED"
	// ErrorCodeConfirmationNotPending: a function response names no pending
	// tool confirmation of the session (unknown id, or already ended).
	ErrorCodeConfirmationNotPending = "GOOSE_CONFIRMATION_NOT_PENDING"
	// ErrorCodeConfirmationTimeout: nobody answered a tool confirmation in time.
	ErrorCodeConfirmationTimeout = "GOOSE_CONFIRMATION_TIMEOUT"
	ErrorCodeInternal            = "GOOSE_ERROR"
)

// SessionKey identifies an ADK session.
type SessionKey struct {
	AppName   string
	UserID    string
	SessionID string
}

// UsageRecord is what the agent reports to a UsageStore after each turn.
type UsageRecord struct {
	Key SessionKey
	// Agent is the goose agent's name: an ADK session has one record per
	// goose agent of the tree.
	Agent          string
	GooseSessionID string
	// Turn is the tokens this turn used (sum of goose's per-call usage).
	Turn goose.Usage
	// Totals is the goose session's accumulated usage after the turn, as goose
	// counts it when it says so, otherwise the previous totals plus Turn.
	Totals goose.Usage
	At     time.Time
}

// UsageStore durably records per-session token totals. RecordUsage is called
// once at the end of every turn that reached goose, also when the client went
// away, with a context that is not cancelled by the client.
type UsageStore interface {
	RecordUsage(ctx context.Context, rec UsageRecord) error
}

// TurnResult summarises one turn for an Observer.
type TurnResult struct {
	GooseSessionID string
	Usage          goose.Usage
	// ErrorCode is empty on success, one of the ErrorCode constants otherwise.
	ErrorCode string
	// FirstEvent is the time from turn start to the first event yielded (0 if none).
	FirstEvent time.Duration
	Duration   time.Duration
	Events     int
	// AwaitingConfirmation: the turn ended at a tool approval; the goose
	// reply is held until a later turn answers it.
	AwaitingConfirmation bool
}

// Observer is told when turns start and end, e.g. to export metrics or track
// active sessions. Methods must be fast and safe for concurrent use.
type Observer interface {
	TurnStarted(key SessionKey)
	TurnFinished(key SessionKey, res TurnResult)
}

// Config configures New.
type Config struct {
	// Name is the ADK agent name (and the author of its events). Required.
	Name string
	// Description is shown in agent cards and agent trees.
	Description string
	// Backend is the goose server. Required.
	Backend goose.Backend
	// StartOptions are used when a goose session is created. goose needs
	// WorkingDir: an absolute path on goose's machine.
	StartOptions goose.StartOptions
	// Store, when set, records every session's accumulated token totals.
	Store UsageStore
	// Observer, when set, is told about turn starts and ends.
	Observer Observer
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// UsageTimeout bounds the post-turn bookkeeping calls (goose usage query,
	// store write) that run after the client may have gone. Default 5s.
	UsageTimeout time.Duration
	// ConfirmationTimeout is how long a goose tool approval waits for the
	// ADK client's answer before it is denied. Default 10m.
	ConfirmationTimeout time.Duration
	// TracerProvider makes the agent's spans (see trace.go); default the
	// global OpenTelemetry provider, which adk-go's own spans use too.
	TracerProvider trace.TracerProvider
	// SessionService, when set, receives an event for every confirmation
	// that ends outside a turn (timeout, A2A cancel, shutdown), so the
	// session history says why the tool did not run.
	SessionService session.Service
	// BeforeAgentCallbacks and AfterAgentCallbacks run before and after
	// every turn, as for any ADK agent (agent.Config; adk-go's remoteagent
	// takes the same): a callback that returns content or an error ends the
	// turn with it instead (before) or adds it as a last event (after).
	BeforeAgentCallbacks []agent.BeforeAgentCallback
	AfterAgentCallbacks  []agent.AfterAgentCallback
	// IdleSessions bounds how many ADK sessions the agent keeps in memory
	// between turns (their goose session, already resumed). Beyond it the
	// least recently used idle ones are forgotten; their next turn resumes
	// the goose session their ADK state names (a goose session started
	// early that no turn used is deleted from goose: no state names it).
	// Default 4096.
	IdleSessions int
	// Workspaces, when set, gives each ADK session its goose working
	// directory in place of StartOptions.WorkingDir (see package
	// sidecar/workspace).
	Workspaces Workspaces
	// StartGooseOnCreate starts the goose session in the background as soon
	// as SessionService creates the ADK session, so the first turn does not
	// wait for goose to start it (its agent and extensions). A first turn
	// that comes sooner waits for that start instead of making a second
	// one; a start that fails is logged and the first turn tries again.
	// Until a turn uses it only this process knows it: Controller.Close
	// deletes it from goose, and EarlySessions, when set, keeps it listed
	// for the next process should this one die first.
	StartGooseOnCreate bool
	// EarlySessions, when set, durably lists the goose sessions started
	// early that no turn has taken, so that those of a process that died
	// before its Close are deleted by the next (Controller.DeleteLeftEarly).
	EarlySessions EarlySessionStore
	// AdmitLiveTurn, when set, is asked before each turn of a live session
	// (RunLive) that would start a goose reply; an answer to a tool
	// confirmation continues one and is not asked about. An error ends that
	// turn with an error event and the live session goes on. An error with
	// an ErrorCode() string method sets the event's ErrorCode. (Before and
	// after agent callbacks do not run for live turns: adk-go's runner
	// runs them around Run only.)
	AdmitLiveTurn func(ctx context.Context, key SessionKey) error
}

// EarlySessionStore durably lists goose sessions started early
// (StartGooseOnCreate) that no turn has taken: only the process that
// started one can reach it, since no ADK state names it. A session is
// listed as soon as its start returns, before any turn can take it, and
// unlisted before a turn takes it or once it is deleted, so a listed
// session is never one that a turn uses.
type EarlySessionStore interface {
	AddEarly(ctx context.Context, gooseID string) error
	RemoveEarly(ctx context.Context, gooseID string) error
	// ListEarly returns the listed sessions.
	ListEarly(ctx context.Context) ([]string, error)
}

// Workspaces chooses and prepares the working directory of ADK sessions.
// The agent opens it before every turn, not only when it creates the goose
// session: goose refuses to load a session whose directory is gone.
type Workspaces interface {
	// Open returns the session's absolute working directory as goose sees
	// it, created if missing; it stays in use until release is called.
	Open(ctx context.Context, userID, sessionID string) (dir string, release func(), err error)
}

// New returns an ADK agent backed by a goose server. Programs that answer
// or cancel held tool approvals outside a turn, delete sessions, or shut
// down cleanly use NewWithController.
func New(cfg Config) (agent.Agent, error) {
	a, _, err := NewWithController(cfg)
	return a, err
}

// NewWithController returns the agent and its Controller, the program's
// handle on what the agent holds between turns: pending tool
// confirmations (CancelConfirmation, Close) and per-session state
// (DeleteSession, SessionService).
func NewWithController(cfg Config) (agent.Agent, *Controller, error) {
	if cfg.Backend == nil {
		return nil, nil, errors.New("failed to create goose agent: Backend is required")
	}
	if cfg.Name == "" {
		return nil, nil, errors.New("failed to create goose agent: Name is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.UsageTimeout <= 0 {
		cfg.UsageTimeout = 5 * time.Second
	}
	if cfg.ConfirmationTimeout <= 0 {
		cfg.ConfirmationTimeout = 10 * time.Minute
	}
	if cfg.IdleSessions <= 0 {
		cfg.IdleSessions = 4096
	}
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	g := &gooseAgent{cfg: cfg, sessions: map[SessionKey]*sessionEntry{}, tracer: cfg.TracerProvider.Tracer(TracerName)}
	g.stop, g.cancelStop = context.WithCancel(context.Background())
	g.startsStop, g.cancelStarts = context.WithCancel(context.Background())
	a, err := agent.New(agent.Config{
		Name:                 cfg.Name,
		Description:          cfg.Description,
		Run:                  g.run,
		BeforeAgentCallbacks: cfg.BeforeAgentCallbacks,
		AfterAgentCallbacks:  cfg.AfterAgentCallbacks,
	})
	if err != nil {
		g.cancelStop()
		g.cancelStarts()
		return nil, nil, fmt.Errorf("failed to create goose agent: %w", err)
	}
	return &liveGoose{Agent: a, g: g}, &Controller{g: g}, nil
}

type gooseAgent struct {
	cfg    Config
	tracer trace.Tracer

	mu       sync.Mutex
	sessions map[SessionKey]*sessionEntry
	// closed (under mu) refuses new paused replies; stop is cancelled with it.
	closed     bool
	stop       context.Context
	cancelStop context.CancelFunc
	// wg counts running confirmation timeouts and deletions of forgotten
	// early sessions, which Close waits for.
	wg sync.WaitGroup
	// cannotDelete: goose answered that it cannot delete sessions (goosed
	// 1.38-1.41); it is not asked again.
	cannotDelete atomic.Bool
	// starts counts early starts in flight; Close gives them
	// earlyStartGrace before it cancels startsStop.
	starts       sync.WaitGroup
	startsStop   context.Context
	cancelStarts context.CancelFunc
}

// sessionEntry is the process-local state of one ADK session.
type sessionEntry struct {
	// refs (under gooseAgent.mu) counts the turns and controller calls
	// using the entry; lastUsed orders idle entries for forgetting.
	refs     int
	lastUsed time.Time
	// lock is held (a token in the channel) for a whole turn: goose runs one
	// reply per session at a time, and a waiting turn must be able to give up
	// when its context ends, which sync.Mutex cannot.
	lock chan struct{}
	// gooseID caches the mapping so that a turn whose client vanished before
	// the state delta was persisted does not lose the goose session.
	gooseID string
	// ready is true once the goose session was started or resumed by this
	// process (goose needs a resume after either side restarted).
	ready bool
	// unusedEarly (under gooseAgent.mu): gooseID was started early
	// (Config.StartGooseOnCreate) and no turn has taken it since, so no ADK
	// state names it. Only this entry can reach it: when the entry is
	// forgotten (Close, or beyond Config.IdleSessions) the goose session is
	// deleted, not left in goose.
	unusedEarly bool
	// totals are the goose session's accumulated usage after the last turn.
	totals *goose.Usage
	// paused (under gooseAgent.mu) is the reply waiting for a tool
	// confirmation between two ADK turns; resolved remembers recently ended
	// confirmations for clear "no longer pending" answers.
	paused   *pausedReply
	resolved []resolvedConfirmation
}

// entry returns the session's entry, held until unuse.
func (g *gooseAgent) entry(key SessionKey) *sessionEntry {
	g.mu.Lock()
	defer g.mu.Unlock()
	e, ok := g.sessions[key]
	if !ok {
		e = &sessionEntry{lock: make(chan struct{}, 1)}
		g.sessions[key] = e
	}
	e.refs++
	return e
}

// unuse ends a use of entry, then forgets the least recently used idle
// entries while there are more than Config.IdleSessions.
func (g *gooseAgent) unuse(e *sessionEntry) {
	g.mu.Lock()
	defer g.mu.Unlock()
	e.refs--
	e.lastUsed = time.Now()
	if len(g.sessions) <= g.cfg.IdleSessions {
		return
	}
	type idle struct {
		key SessionKey
		at  time.Time
	}
	var idles []idle
	for k, e := range g.sessions {
		// A paused reply (its timeout holds the entry) or a lock taken
		// without a ref (confirmation timeout, Close) keeps it.
		if e.refs == 0 && e.paused == nil && len(e.lock) == 0 {
			idles = append(idles, idle{k, e.lastUsed})
		}
	}
	slices.SortFunc(idles, func(a, b idle) int { return a.at.Compare(b.at) })
	// Down to three quarters, so that the scan runs once per many turns.
	var unreachable []forgotten
	for _, i := range idles {
		if len(g.sessions) <= g.cfg.IdleSessions*3/4 {
			break
		}
		if e := g.sessions[i.key]; e.unusedEarly {
			unreachable = append(unreachable, forgotten{i.key, e.gooseID})
		}
		delete(g.sessions, i.key)
	}
	if len(unreachable) > 0 && !g.closed {
		g.wg.Go(func() { g.deleteForgotten(unreachable) })
	}
}

// forgotten is a goose session started early whose entry was forgotten.
type forgotten struct {
	key     SessionKey
	gooseID string
}

// forgottenDeleteTimeout bounds the deletion of forgotten early sessions.
const forgottenDeleteTimeout = time.Minute

// deleteForgotten deletes goose sessions that only forgotten entries named.
func (g *gooseAgent) deleteForgotten(fs []forgotten) {
	ctx, cancel := context.WithTimeout(context.Background(), forgottenDeleteTimeout)
	defer cancel()
	for _, f := range fs {
		if err := g.deleteGooseSession(ctx, f.key, f.gooseID, "its ADK session ran no turn and was forgotten"); err != nil {
			g.cfg.Logger.WarnContext(ctx, "goose session started early stays in goose", "adk_session", f.key.SessionID, "error", err)
		}
	}
}

func (e *sessionEntry) acquire(ctx context.Context) error {
	select {
	case e.lock <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// tryAcquire takes the lock when nobody holds it.
func (e *sessionEntry) tryAcquire() bool {
	select {
	case e.lock <- struct{}{}:
		return true
	default:
		return false
	}
}

func (e *sessionEntry) release() { <-e.lock }

func (g *gooseAgent) run(ic agent.InvocationContext) iter.Seq2[*session.Event, error] {
	return func(yield func(*session.Event, error) bool) {
		t := newTurn(g, ic, yield)
		t.run()
	}
}

// replyStream is a goose reply read event by event (iter.Pull2 over
// Backend.Reply), so that a turn can stop reading at a tool approval and the
// turn that answers it can read on. Its context is detached from the request
// and linked to the current turn's instead, so a reply paused at a tool
// approval survives the end of the turn that asked and is relinked to the
// turn that answers.
type replyStream struct {
	next   func() (goose.Event, error, bool)
	stop   func()
	cancel context.CancelFunc
	unlink func() bool
}

func openReply(ctx context.Context, b goose.Backend, gooseID string, msg goose.UserMessage) *replyStream {
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r := &replyStream{cancel: cancel, unlink: context.AfterFunc(ctx, cancel)}
	r.next, r.stop = iter.Pull2(b.Reply(rctx, gooseID, msg))
	return r
}

// detach stops the current turn's end from cancelling the reply.
func (r *replyStream) detach() {
	r.unlink()
}

// attach makes the end of ctx cancel the reply.
func (r *replyStream) attach(ctx context.Context) {
	r.unlink()
	r.unlink = context.AfterFunc(ctx, r.cancel)
}

// close ends the reply: cancelling first makes a backend blocked on the wire
// return, then stop waits for the sequence to finish.
func (r *replyStream) close() {
	r.unlink()
	r.cancel()
	r.stop()
}
