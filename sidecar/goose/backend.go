// Package goose holds the clients the adk2goose sidecar uses to talk to a goose
// server. Two wire protocols exist upstream: ACP (`goose serve`, current goose,
// the default) and REST (`goosed`, goose up to 1.41). Both sit behind Backend so
// that the ADK agent above them does not care which one it drives.
package goose

import (
	"context"
	"encoding/json"
	"iter"
	"time"
)

// Flavor names a goose server protocol.
type Flavor string

const (
	// FlavorServe is `goose serve`: ACP (JSON-RPC) over WebSocket on /acp.
	FlavorServe Flavor = "serve"
	// FlavorGoosed is `goosed`: the REST + SSE API of goose 1.37–1.41.
	FlavorGoosed Flavor = "goosed"
)

// How long goose serve's client keeps a session's connection open without a
// reply (acp.Config's IdleTimeout and UnusedIdleTimeout): the default, and
// for a session that has run no reply yet. They live here, with the
// flavours, so that adk2goose's flags can show them without linking acp.
const (
	DefaultServeIdleTimeout       = 10 * time.Minute
	DefaultServeUnusedIdleTimeout = 2 * time.Minute
)

// Backend is everything the sidecar needs from a goose server, and no more:
// each method has a caller outside the backends and their tests.
// backendtest.Run holds every implementation to the promises below.
//
// Implementations are safe for concurrent use by many sessions at once.
type Backend interface {
	// Flavor reports which protocol this backend speaks.
	Flavor() Flavor
	// Health returns nil when the goose server answers its health route.
	Health(ctx context.Context) error

	// StartSession creates a goose session and makes it ready to reply
	// (for goosed: /agent/start then /agent/resume). The Session returned
	// has at least the new session's ID and WorkingDir.
	StartSession(ctx context.Context, opts StartOptions) (Session, error)
	// ResumeSession makes an existing session ready to reply again, e.g. after
	// the goose server or the sidecar restarted; ErrSessionNotFound when
	// goose has none.
	ResumeSession(ctx context.Context, id string) (Session, error)
	// DeleteSession deletes a session and its history; ErrSessionNotFound
	// when goose has none, ErrUnsupported when the server version cannot
	// delete (goosed 1.38–1.41).
	DeleteSession(ctx context.Context, id string) error

	// Reply sends one user message and streams goose's reply:
	//   - The sequence yields at least one value. It ends after a *Finish
	//     event, or after the first non-nil error, which is then the last
	//     value: yield is not called again.
	//   - Errors goose reports for the reply arrive as *AgentError. An unknown
	//     session gives an error wrapping ErrSessionNotFound; a stream that
	//     stops before goose finished it (dropped connection, Close) gives one
	//     wrapping ErrStreamBroken, after the events that did arrive. A
	//     message over the size limit (DefaultMaxMessageBytes) gives only an
	//     error wrapping ErrMessageTooLarge and reaches no goose.
	//   - Cancelling ctx ends the stream within 100 ms and cancels the reply
	//     in goose. Once ctx is done the only value still yielded is an error
	//     wrapping ctx.Err(): events that had already arrived are dropped. A
	//     ctx done before the call sends nothing to goose.
	//   - When goose reported usage, the reply's last *UsageUpdate has
	//     HasAccumulated and the session totals that Usage then returns.
	//   - While an *ApprovalRequest is outstanding the stream blocks until
	//     Approve is called.
	//   - A consumer that reads it event by event uses iter.Pull2; stopping
	//     it (or a range) before the end cancels the reply in goose.
	Reply(ctx context.Context, sessionID string, msg UserMessage) iter.Seq2[Event, error]
	// Approve answers an *ApprovalRequest received from Reply.
	Approve(ctx context.Context, sessionID, requestID string, decision Decision) error
	// Usage returns the session's accumulated token totals as goose counts
	// them; ErrSessionNotFound when goose has no such session.
	Usage(ctx context.Context, sessionID string) (Usage, error)

	// Close ends the replies in flight and releases connections; later
	// replies fail. Sessions persist in goose.
	Close() error
}

// WorkingDirResumer is implemented by backends that can resume a session in
// a given working directory, which then becomes the session's: goose's ACP
// session/load takes a cwd and records it as the session's working
// directory (upstream load_session.rs, prepare_session_for_activation). It
// lets a session follow a changed workspace layout instead of failing on a
// directory that no longer exists.
type WorkingDirResumer interface {
	ResumeSessionIn(ctx context.Context, id, workingDir string) (Session, error)
}

// StartOptions configures a new goose session.
type StartOptions struct {
	// WorkingDir is the session's absolute working directory in the goose container.
	WorkingDir string
	// Provider and Model override goose's configured defaults when set.
	Provider string
	Model    string
	// Mode, when set, overrides goose's GOOSE_MODE for the session (goose
	// checks the id). The adk2goose binary leaves it empty: the operator
	// sets GOOSE_MODE from spec.mode, which every new session takes.
	Mode string
}

// Session is goose's view of one session.
type Session struct {
	ID           string
	Name         string
	WorkingDir   string
	CreatedAt    time.Time
	UpdatedAt    time.Time
	MessageCount int
	// Usage holds accumulated totals when goose sends them with the session
	// (goosed); zero otherwise.
	Usage Usage
}

// UserMessage is what the ADK side sends to goose.
type UserMessage struct {
	Text string
}

// Decision answers a tool-approval request.
type Decision string

const (
	AllowOnce   Decision = "allow_once"
	AlwaysAllow Decision = "always_allow"
	DenyOnce    Decision = "deny_once"
	AlwaysDeny  Decision = "always_deny"
	// CancelDecision aborts the tool call without an allow or deny.
	CancelDecision Decision = "cancel"
)

// Event is one thing goose said during a reply. It is one of *TextDelta,
// *ThinkingDelta, *ToolRequest, *ToolResponse, *ApprovalRequest,
// *Notification, *UsageUpdate or *Finish. Errors travel in the error slot of
// Reply's sequence (see AgentError), so a consumer has one place to look.
type Event interface{ isEvent() }

// TextDelta is a piece of assistant text. Deltas of one message share MessageID.
type TextDelta struct {
	MessageID string
	Text      string
}

// ThinkingDelta is a piece of the model's reasoning.
type ThinkingDelta struct {
	MessageID string
	Text      string
}

// ToolRequest is goose calling a tool.
type ToolRequest struct {
	ID        string
	Name      string
	Arguments json.RawMessage
}

// ToolResponse is a tool's result.
type ToolResponse struct {
	ID      string
	Name    string
	Text    string
	IsError bool
	// Structured is the MCP structuredContent when the tool returned one.
	Structured json.RawMessage
}

// ApprovalRequest is goose asking whether it may run a tool (approve and
// smart_approve modes). Answer it with Backend.Approve using ID.
type ApprovalRequest struct {
	// ID identifies the request to Approve: the tool call id.
	ID        string
	ToolName  string
	Arguments json.RawMessage
	Prompt    string
}

// Notification is a progress or log message, usually from a running tool.
type Notification struct {
	// ToolCallID is the tool call the notification belongs to, when known.
	ToolCallID string
	// Kind is "progress", "message" or "notice".
	Kind     string
	Message  string
	Progress *float64
	Total    *float64
}

// UsageUpdate reports tokens. Last is the latest provider call; Accumulated is
// the session's running total and is meaningful only when HasAccumulated.
type UsageUpdate struct {
	Last           Usage
	Accumulated    Usage
	HasAccumulated bool
	ContextLimit   int64
}

// Finish ends a reply. Reason is "end_turn", "stop" or FinishCancelled.
type Finish struct {
	Reason string
}

// FinishCancelled is the Finish.Reason of a reply goose stopped because it
// was cancelled (ACP's stopReason "cancelled"), by this client or another.
const FinishCancelled = "cancelled"

func (*TextDelta) isEvent()       {}
func (*ThinkingDelta) isEvent()   {}
func (*ToolRequest) isEvent()     {}
func (*ToolResponse) isEvent()    {}
func (*ApprovalRequest) isEvent() {}
func (*Notification) isEvent()    {}
func (*UsageUpdate) isEvent()     {}
func (*Finish) isEvent()          {}
