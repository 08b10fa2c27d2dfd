package acp

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/adk2goose/goose-operator/sidecar/goose"
)

// Method names goose uses (goose-acp.md §2.6, §3).
const (
	methodSessionUpdate     = "session/update"
	methodGooseUpdate       = "_goose/unstable/session/update"
	methodRequestPermission = "session/request_permission"
	methodInitialize        = "initialize"
	methodSessionNew        = "session/new"
	methodSessionLoad       = "session/load"
	methodSessionPrompt     = "session/prompt"
	methodSessionCancel     = "session/cancel"
	methodSessionSetMode    = "session/set_mode"
	methodSetConfigOption   = "session/set_config_option"
	methodSessionDelete     = "session/delete"
	methodSessionInfo       = "_goose/unstable/session/info"
	methodSessionExport     = "_goose/unstable/session/export"
)

// frame is one JSON-RPC message from goose (§2.5) together with the params
// of every method this client reads, decoded by decodeFrame in one
// encoding/json pass: the one place goose's messages are read.
type frame struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params params          `json:"params"`
	// Result stays raw: its type is the request's, which only its caller knows.
	Result json.RawMessage      `json:"result"`
	Error  *acpsdk.RequestError `json:"error"`
	// Invalid is why params or error could not be read (a field of the wrong
	// type): this message alone fails, not the connection.
	Invalid error `json:"-"`
}

// params holds what the client reads of session/update (§2.6),
// _goose/unstable/session/update (§3), session/request_permission (§2.7) and
// $/cancel_request.
type params struct {
	SessionID string `json:"sessionId"`
	Update    update `json:"update"`
	// session/request_permission
	ToolCall struct {
		ToolCallID string          `json:"toolCallId"`
		Title      string          `json:"title"`
		RawInput   json.RawMessage `json:"rawInput"`
	} `json:"toolCall"`
	Options []acpsdk.PermissionOption `json:"options"`
	// $/cancel_request
	RequestID json.RawMessage `json:"requestId"`
}

// update is the update of either notification. Two keys have two shapes,
// so they decode to any: content (a chunk's block, or a tool call's array)
// and status (a tool call's, or goose's status_message).
type update struct {
	SessionUpdate string `json:"sessionUpdate"`
	// _meta is goose's own (decodeFrame reads a field of another type as absent).
	Meta struct {
		Goose struct {
			MessageID string `json:"messageId"`
			// activeRunId is a run's id, or null when it ended: kept raw to
			// tell null from absent.
			ActiveRunID json.RawMessage `json:"activeRunId"`
			ToolCall    struct {
				ToolName string `json:"toolName"`
			} `json:"toolCall"`
		} `json:"goose"`
	} `json:"_meta"`
	// agent_message_chunk, agent_thought_chunk; goose's message_usage
	MessageID string `json:"messageId"`
	Content   any    `json:"content"`
	// tool_call, tool_call_update
	ToolCallID string          `json:"toolCallId"`
	Title      string          `json:"title"`
	Status     any             `json:"status"`
	RawInput   json.RawMessage `json:"rawInput"`
	RawOutput  json.RawMessage `json:"rawOutput"`
	// usage_update: ACP's (used, size, cost) and goose's (used, contextLimit
	// and the accumulated totals, §3.1)
	Used int64 `json:"used"`
	Size int64 `json:"size"`
	Cost *struct {
		Amount float64 `json:"amount"`
	} `json:"cost"`
	ContextLimit            int64    `json:"contextLimit"`
	AccumulatedInputTokens  int64    `json:"accumulatedInputTokens"`
	AccumulatedOutputTokens int64    `json:"accumulatedOutputTokens"`
	AccumulatedCost         *float64 `json:"accumulatedCost"`
	// goose's message_usage
	Usage *struct {
		InputTokens  int64    `json:"inputTokens"`
		OutputTokens int64    `json:"outputTokens"`
		TotalTokens  int64    `json:"totalTokens"`
		Cost         *float64 `json:"cost"`
	} `json:"usage"`
}

// decodeFrame reads one frame from goose. An error means it is no JSON-RPC
// message at all (not JSON, not an object, or a method that is no string):
// nothing in it can be answered or routed. A field of the wrong type in
// params or error only sets f.Invalid. It never panics.
func decodeFrame(data []byte) (*frame, error) {
	f := new(frame)
	err := json.Unmarshal(data, f)
	if err == nil {
		return f, nil
	}
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) || !inField(te.Field, "params") && !inField(te.Field, "error") {
		return nil, err
	}
	// encoding/json reports only the first type error: the method must read too.
	var envelope struct {
		Method string `json:"method"`
	}
	if err := json.Unmarshal(data, &envelope); err != nil {
		return nil, err
	}
	// ACP's _meta may hold anything: goose's own field of another type reads
	// as absent.
	if !strings.Contains(te.Field, "._meta") {
		f.Invalid = err
	}
	return f, nil
}

// inField reports whether a dotted JSON path is field or inside it.
func inField(path, field string) bool {
	return path == field || strings.HasPrefix(path, field+".")
}

// decoded is what one goose notification means to the client.
type decoded struct {
	SessionID string
	// Event is nil when the notification carries nothing a Reply reports
	// (available_commands_update, session_info_update, title-only tool
	// updates, ...).
	Event goose.Event
	// Accumulated is set by goose's custom usage_update: the session's
	// running totals, kept by the client for Usage (§3.1).
	Accumulated *goose.Usage
	// Custom marks a `_goose/...` notification, proof that goose honoured
	// customNotifications, after which the stable usage_update is redundant.
	Custom bool
	// StableUsage marks an event built from the stable usage_update.
	StableUsage bool
	// ToolName is the goose tool name of a tool_call, remembered per reply so
	// the matching result and permission request can name the tool.
	ToolName string
	// ActiveRun is set by a session_info_update that carries goose's
	// _meta.goose.activeRunId: the run id when a run starts, "" when it ends.
	ActiveRun *string
}

var (
	errNoSession           = errors.New("notification has no sessionId")
	errUnknownNotification = errors.New("not a notification this client reads")
)

// notification is what a notification frame (session/update or
// _goose/unstable/session/update) means to the client.
func (f *frame) notification() (decoded, error) {
	var d decoded
	err := f.Invalid
	if err == nil {
		switch f.Method {
		case methodSessionUpdate:
			d, err = sessionUpdate(&f.Params)
		case methodGooseUpdate:
			d, err = gooseUpdate(&f.Params)
		default:
			err = errUnknownNotification
		}
	}
	if err != nil {
		return decoded{}, fmt.Errorf("failed to decode %s: %w", f.Method, err)
	}
	return d, nil
}

// sessionUpdate reads any session/update.
func sessionUpdate(p *params) (decoded, error) {
	d := decoded{SessionID: p.SessionID}
	if d.SessionID == "" {
		return d, errNoSession
	}
	u := &p.Update
	gm := &u.Meta.Goose
	switch u.SessionUpdate {
	case "agent_message_chunk", "agent_thought_chunk":
		text, ok, err := chunkText(u.Content)
		if !ok || err != nil {
			return d, err
		}
		// The ACP messageId wins; goose puts it in _meta.goose (§2.6).
		id := u.MessageID
		if id == "" {
			id = gm.MessageID
		}
		if u.SessionUpdate == "agent_message_chunk" {
			d.Event = &goose.TextDelta{MessageID: id, Text: text}
		} else {
			d.Event = &goose.ThinkingDelta{MessageID: id, Text: text}
		}
	case "tool_call":
		// goose's first tool_call omits status (pending) and kind (§2.6);
		// the tool's real name is in _meta.goose.toolCall.toolName.
		name := gm.ToolCall.ToolName
		if name == "" {
			name = u.Title
		}
		d.ToolName = name
		d.Event = &goose.ToolRequest{ID: u.ToolCallID, Name: name, Arguments: jsonValue(u.RawInput)}
		// A tool_call that already carries a final status (session/load
		// replays) has no later update; nothing more to report here.
	case "tool_call_update":
		// Only completed/failed carry the result (§2.6); title-only updates
		// (the async LLM title) and in_progress report nothing.
		status, _ := u.Status.(string)
		if status != string(acpsdk.ToolCallStatusCompleted) && status != string(acpsdk.ToolCallStatusFailed) {
			return d, nil
		}
		text, err := toolText(u.Content)
		if err != nil {
			return decoded{}, err
		}
		d.Event = &goose.ToolResponse{
			ID:         u.ToolCallID,
			Name:       gm.ToolCall.ToolName,
			Text:       text,
			IsError:    status == string(acpsdk.ToolCallStatusFailed),
			Structured: jsonValue(u.RawOutput),
		}
	case "session_info_update":
		switch id := gm.ActiveRunID; {
		case string(id) == "null": // the run ended
			d.ActiveRun = new(string)
		case len(id) > 0 && id[0] == '"':
			var run string
			if json.Unmarshal(id, &run) == nil {
				d.ActiveRun = &run
			}
		}
	case "usage_update":
		var cost *float64
		if u.Cost != nil {
			cost = &u.Cost.Amount
		}
		d.stableUsage(u.Used, u.Size, cost)
	}
	return d, nil
}

// gooseUpdate reads goose's custom notification (§3, §3.1), for which the
// acp-go-sdk has no type.
func gooseUpdate(p *params) (decoded, error) {
	d := decoded{SessionID: p.SessionID, Custom: true}
	if d.SessionID == "" {
		return d, errNoSession
	}
	u := &p.Update
	switch u.SessionUpdate {
	case "usage_update":
		d.gooseUsage(u.Used, u.ContextLimit, goose.Usage{
			InputTokens:  u.AccumulatedInputTokens,
			OutputTokens: u.AccumulatedOutputTokens,
			Cost:         u.AccumulatedCost,
		})
	case "message_usage":
		if u.Usage == nil {
			return d, nil
		}
		d.messageUsage(goose.Usage{
			InputTokens:  u.Usage.InputTokens,
			OutputTokens: u.Usage.OutputTokens,
			TotalTokens:  u.Usage.TotalTokens,
			Cost:         u.Usage.Cost,
		})
	case "status_message":
		status, ok := u.Status.(map[string]any)
		if !ok {
			return d, nil
		}
		kind, _ := status["type"].(string)
		if kind == "" {
			kind = "notice"
		}
		msg, _ := status["message"].(string)
		d.Event = &goose.Notification{Kind: kind, Message: msg}
	}
	return d, nil
}

// What goose's usage notifications mean:

// stableUsage: the stable usage_update's used is the last call's total,
// size the context limit, cost the accumulated cost when known (§3.1).
func (d *decoded) stableUsage(used, size int64, cost *float64) {
	ev := &goose.UsageUpdate{Last: goose.Usage{TotalTokens: used}, ContextLimit: size}
	ev.Accumulated.Cost = cost
	d.Event, d.StableUsage = ev, true
}

// gooseUsage: goose's own usage_update carries the session's running
// totals; goose sends no accumulated total, Normalized derives it.
func (d *decoded) gooseUsage(used, contextLimit int64, accumulated goose.Usage) {
	acc := accumulated.Normalized()
	d.Accumulated = &acc
	d.Event = &goose.UsageUpdate{Last: goose.Usage{TotalTokens: used}, Accumulated: acc, HasAccumulated: true, ContextLimit: contextLimit}
}

// messageUsage: message_usage is one provider call's usage.
func (d *decoded) messageUsage(last goose.Usage) {
	d.Event = &goose.UsageUpdate{Last: last.Normalized()}
}

// jsonValue is a raw JSON value, nil for none or null.
func jsonValue(m json.RawMessage) json.RawMessage {
	if string(m) == "null" {
		return nil
	}
	return m
}

// chunkText is the text of a chunk's content block; ok is false for a
// block that is no text (an image, a resource).
func chunkText(content any) (text string, ok bool, err error) {
	block, _ := content.(map[string]any)
	if block["type"] != "text" {
		return "", false, nil
	}
	text, ok = block["text"].(string)
	if !ok {
		return "", false, errors.New("a text block without text")
	}
	return text, true, nil
}

// toolText joins the text blocks of a tool call's content array; other
// kinds of content (a diff, a terminal) are skipped.
func toolText(content any) (string, error) {
	items, _ := content.([]any)
	var parts []string
	for _, it := range items {
		item, _ := it.(map[string]any)
		if item["type"] != "content" {
			continue
		}
		text, ok, err := chunkText(item["content"])
		if err != nil {
			return "", fmt.Errorf("failed to read a tool result: %w", err)
		}
		if ok {
			parts = append(parts, text)
		}
	}
	return strings.Join(parts, "\n"), nil
}
