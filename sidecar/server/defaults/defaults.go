// Package defaults holds the values that server.Config takes for its zero
// fields. It is a package of its own so that adk2goose's flags can show
// them without linking the server (and its fuzz target stays fast).
package defaults

import "time"

// Body limits. A user message reaches goose as one JSON frame; the goose
// clients refuse one over goose.DefaultMaxMessageBytes (8 MiB,
// JSON-encoded) and goose drops its socket above 16 MiB. A body of 5 MiB
// leaves room for JSON escaping and the envelope, so a message that large is
// refused at the door with 413 rather than deep in a turn.
const (
	MaxMessageBytes = 5 << 20 // /run, /run_sse and A2A messages
	MaxOtherBytes   = 1 << 20 // session create, PATCH (state) and every other route
	BodyReadTimeout = 30 * time.Second
)

// ActiveWindow: a session used within it counts as active in /stats.
const ActiveWindow = 10 * time.Minute

// SSEWriteTimeout is the longest /run_sse response.
const SSEWriteTimeout = 10 * time.Minute

// ConfirmationTimeout is how long a goose tool approval waits for the
// client's answer before it is denied.
const ConfirmationTimeout = 10 * time.Minute

// TurnWait is how long a request waits for the turn of a session that is
// busy with another one.
const TurnWait = time.Minute

// DebugTraces is how many turns' traces the ADK web UI's trace view keeps,
// adkrest's own default (adk web's -trace_capacity). A trace of a one-turn
// reply without tools holds about 2 KiB, so a busy sidecar keeps some 20 MB
// of them; a smaller number saves that memory and shortens how far back the
// trace view reaches.
const DebugTraces = 10000

// Limits of the live route (/run_live).
const (
	LiveConnsPerUser = 16
	LiveWriteTimeout = 30 * time.Second
	LiveIdleTimeout  = 10 * time.Minute
)
