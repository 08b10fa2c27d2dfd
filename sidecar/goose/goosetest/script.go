// Package goosetest provides fake goose servers for tests, benchmarks and the
// demo: a fake `goose serve` (ACP over WebSocket) and a fake `goosed` (REST +
// SSE). Both reproduce the upstream wire described in shared/reference and are
// driven by the same Script, so one test table can run against either.
package goosetest

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"time"
)

// Script decides how the fake answers one user message.
// It is called with the goose session id and the user's text.
type Script func(sessionID, userText string) Reply

// Reply is the scripted content of one goose reply, emitted in order.
type Reply struct {
	Steps []Step
}

// Step is one scripted thing goose does. Exactly one field other than Delay
// should be set; Delay (if any) is waited before the step is emitted.
type Step struct {
	Delay time.Duration

	// Text is an assistant text delta. Consecutive Text/Thinking steps share
	// one goose message id, as a streaming provider's chunks do.
	Text string
	// Thinking is a reasoning delta.
	Thinking string
	// Tool is a tool call: request, optional approval, then response.
	Tool *ToolStep
	// Notify is an MCP progress/log notification from a running tool.
	Notify *NotifyStep
	// Usage is one provider call's token use; the fake accumulates it per
	// session and reports both last-call and accumulated figures.
	Usage *UsageStep
	// Error makes goose report an agent error (REST `Error` event, ACP
	// JSON-RPC error -32603) and end the reply.
	Error string
	// Drop cuts the connection mid-stream without finishing the reply.
	Drop bool
	// DropMidFrame cuts the connection inside a frame: goose serve writes a
	// WebSocket frame's header and half its payload, goosed half an SSE
	// event, then the socket closes with no close frame, as when goose is
	// killed (OOM, crash) while its writer is sending.
	DropMidFrame bool
}

// ToolStep scripts a tool call.
type ToolStep struct {
	ID string
	// Name is the tool name the model called. Tools of MCP extensions are
	// prefixed ("github__create_issue"); goose's platform extensions with
	// unprefixed tools are not ("shell" of developer).
	Name string
	// Extension is the owning extension when Name has no prefix
	// ("developer" for "shell"); empty derives it from the prefix.
	Extension string
	Arguments json.RawMessage
	Result    string
	IsError   bool
	// NeedsApproval makes goose ask before running the tool and block until
	// the client answers (approve/smart_approve mode). A denial produces
	// DeclinedToolResult instead of Result.
	NeedsApproval bool
	// Run, when set, runs the tool when goose would, after any approval, and
	// its result replaces Result and IsError (the e2e stand-in calls a real
	// MCP server with it). A denied tool does not run.
	Run func() (result string, isError bool)
}

// DeclinedToolResult is the tool result goose records when the user denies a
// tool call: its DECLINED_RESPONSE (crates/goose/src/agents/tool_execution.rs).
const DeclinedToolResult = "The user has declined to run this tool. DO NOT attempt to call this tool again. If there are no alternative methods to proceed, clearly explain the situation and STOP."

// NotifyStep scripts a notification.
type NotifyStep struct {
	ToolCallID string
	Message    string
	Progress   float64
	Total      float64
}

// UsageStep scripts one provider call's tokens.
type UsageStep struct {
	Input  int64
	Output int64
	Cost   float64
}

// Echo is a Script that answers with the user's text in two deltas and a
// usage step whose counts are derived from the text length.
func Echo(_ string, userText string) Reply {
	half := len(userText) / 2
	return Reply{Steps: []Step{
		{Text: "echo: " + userText[:half]},
		{Text: userText[half:]},
		{Usage: &UsageStep{Input: int64(10 + len(userText)), Output: int64(len(userText))}},
	}}
}

// Fixed is a Script that always plays the same reply.
func Fixed(r Reply) Script {
	return func(string, string) Reply { return r }
}

// newServer starts an httptest server for h on l, or on a new loopback port
// when l is nil.
func newServer(h http.Handler, l net.Listener) *httptest.Server {
	if l == nil {
		return httptest.NewServer(h)
	}
	srv := httptest.NewUnstartedServer(h)
	_ = srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	return srv
}
