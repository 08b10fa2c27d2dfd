package goose

import (
	"errors"
	"fmt"
)

// Sentinel errors, matched with errors.Is. Backends wrap them with context.
var (
	// ErrUnauthorized: goose rejected the secret key (HTTP 401).
	ErrUnauthorized = errors.New("goose rejected the secret key")
	// ErrSessionNotFound: goose has no such session (HTTP 404, ACP -32002).
	ErrSessionNotFound = errors.New("goose session not found")
	// ErrNotReady: the goose agent is not ready yet (HTTP 412/424).
	ErrNotReady = errors.New("goose agent not ready")
	// ErrRateLimited: goose answered 429 after every retry.
	ErrRateLimited = errors.New("goose rate limited the request")
	// ErrUnavailable: goose cannot be reached (503, connection refused).
	ErrUnavailable = errors.New("goose server unavailable")
	// ErrUnsupported: this goose version lacks the operation.
	ErrUnsupported = errors.New("not supported by this goose server")
	// ErrStreamBroken: the reply stream ended before goose finished it.
	ErrStreamBroken = errors.New("goose reply stream ended early")
	// ErrMessageTooLarge: a message is over a size limit, either a user
	// message too large to send (see DefaultMaxMessageBytes) or a message
	// from goose too large to read. Only the call or reply it belongs to fails.
	ErrMessageTooLarge = errors.New("message over the size limit")
)

// DefaultMaxMessageBytes caps a user message, measured as the JSON string
// goose receives (escapes included). goose serve drops the whole WebSocket on
// a frame over 16 MiB (tungstenite's default, goose#10751), and whatever goose
// later sends back containing the message (a session/load replay, an echo)
// must fit the 10 MiB line acp-go-sdk reads. 8 MiB stays under both, with
// room for the envelope. goosed accepts more (50 MiB bodies) but the same cap
// keeps the flavours alike.
const DefaultMaxMessageBytes = 8 << 20

// AgentError is an error goose itself reported for a reply (a REST `Error`
// event, an ACP JSON-RPC error to session/prompt).
type AgentError struct {
	// Code is the JSON-RPC error code for ACP, 0 for REST.
	Code    int
	Message string
}

func (e *AgentError) Error() string {
	if e.Code != 0 {
		return fmt.Sprintf("goose error %d: %s", e.Code, e.Message)
	}
	return "goose error: " + e.Message
}

// HTTPError is an unexpected HTTP status from goose, with the body it sent.
type HTTPError struct {
	StatusCode int
	Body       string
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("goose answered HTTP %d: %s", e.StatusCode, e.Body)
}
