package acp

import (
	"bytes"
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

// decodeNotification turns the params of one goose notification
// (session/update or _goose/unstable/session/update) into what it means to
// the client: the one place goose's updates are read. It never panics.
func decodeNotification(method string, params []byte) (decoded, error) {
	var d decoded
	var err error
	switch method {
	case methodSessionUpdate:
		d, err = decodeSessionUpdate(params)
	case methodGooseUpdate:
		d, err = decodeGooseUpdate(params)
	default:
		err = errUnknownNotification
	}
	if err != nil {
		return decoded{}, fmt.Errorf("failed to decode %s: %w", method, err)
	}
	return d, nil
}

// sessionUpdate holds what the client reads of a session/update (§2.6): one pass; the SDK's
// union types decode each frame several times; binding target: CPU per reply <= 1.8x adk-only.
type sessionUpdate struct {
	SessionID string `json:"sessionId"`
	// ACP's _meta is an object; nothing in it is read here.
	Meta   struct{} `json:"_meta"`
	Update struct {
		SessionUpdate string     `json:"sessionUpdate"`
		Meta          updateMeta `json:"_meta"`
		// agent_message_chunk, agent_thought_chunk
		MessageID string `json:"messageId"`
		// a chunk's content block, or a tool call's content array
		Content updateContent `json:"content"`
		// tool_call, tool_call_update
		ToolCallID string                `json:"toolCallId"`
		Title      string                `json:"title"`
		Status     acpsdk.ToolCallStatus `json:"status"`
		RawInput   json.RawMessage       `json:"rawInput"`
		RawOutput  json.RawMessage       `json:"rawOutput"`
		// usage_update
		Used int64 `json:"used"`
		Size int64 `json:"size"`
		Cost *struct {
			Amount float64 `json:"amount"`
		} `json:"cost"`
	} `json:"update"`
}

// updateMeta is an update's _meta, where goose keeps its own fields.
type updateMeta struct {
	Goose metaField[struct {
		MessageID   metaField[string] `json:"messageId"`
		ActiveRunID metaField[string] `json:"activeRunId"`
		ToolCall    metaField[struct {
			ToolName metaField[string] `json:"toolName"`
		}] `json:"toolCall"`
	}] `json:"goose"`
}

// metaField is _meta.goose or a field in it: goose's own, so a value of
// another JSON type than T reads as T's zero value instead of failing the
// update. Set tells a field that is there, even null, from one that is not.
type metaField[T any] struct {
	V   T
	Set bool
}

func (f *metaField[T]) UnmarshalJSON(b []byte) error {
	f.Set = true
	if json.Unmarshal(b, &f.V) != nil {
		var zero T
		f.V = zero
	}
	return nil
}

// updateContent is the one key of two shapes: a chunk's content block or a
// tool call's content array, kept raw as only a final tool_call_update's is read.
type updateContent struct {
	Type  string          `json:"type"`
	Text  string          `json:"text"`
	Items json.RawMessage `json:"-"`
}

func (c *updateContent) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '[' {
		c.Items = bytes.Clone(b)
		return nil
	}
	type block updateContent // without this method
	return json.Unmarshal(b, (*block)(c))
}

// decodeSessionUpdate decodes any session/update.
func decodeSessionUpdate(params []byte) (decoded, error) {
	var n sessionUpdate
	if err := json.Unmarshal(params, &n); err != nil {
		return decoded{}, err
	}
	d := decoded{SessionID: n.SessionID}
	if d.SessionID == "" {
		return d, errNoSession
	}
	u := &n.Update
	gm := &u.Meta.Goose.V
	switch u.SessionUpdate {
	case "agent_message_chunk", "agent_thought_chunk":
		if u.Content.Type != "text" {
			return d, nil
		}
		// The ACP messageId wins; goose puts it in _meta.goose (§2.6).
		id := u.MessageID
		if id == "" {
			id = gm.MessageID.V
		}
		if u.SessionUpdate == "agent_message_chunk" {
			d.Event = &goose.TextDelta{MessageID: id, Text: u.Content.Text}
		} else {
			d.Event = &goose.ThinkingDelta{MessageID: id, Text: u.Content.Text}
		}
	case "tool_call":
		// goose's first tool_call omits status (pending) and kind (§2.6);
		// the tool's real name is in _meta.goose.toolCall.toolName.
		name := gm.ToolCall.V.ToolName.V
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
		if u.Status != acpsdk.ToolCallStatusCompleted && u.Status != acpsdk.ToolCallStatusFailed {
			return d, nil
		}
		text, err := toolText(u.Content.Items)
		if err != nil {
			return decoded{}, err
		}
		d.Event = &goose.ToolResponse{
			ID:         u.ToolCallID,
			Name:       gm.ToolCall.V.ToolName.V,
			Text:       text,
			IsError:    u.Status == acpsdk.ToolCallStatusFailed,
			Structured: jsonValue(u.RawOutput),
		}
	case "session_info_update":
		if gm.ActiveRunID.Set {
			id := gm.ActiveRunID.V // "" when null: the run ended
			d.ActiveRun = &id
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

// gooseUpdate is goose's custom notification (§3, §3.1). The acp-go-sdk has
// no type for it.
type gooseUpdate struct {
	SessionID string `json:"sessionId"`
	Update    struct {
		SessionUpdate string `json:"sessionUpdate"`
		// usage_update
		Used                    int64    `json:"used"`
		ContextLimit            int64    `json:"contextLimit"`
		AccumulatedInputTokens  int64    `json:"accumulatedInputTokens"`
		AccumulatedOutputTokens int64    `json:"accumulatedOutputTokens"`
		AccumulatedCost         *float64 `json:"accumulatedCost"`
		// message_usage
		MessageID string `json:"messageId"`
		Usage     *struct {
			InputTokens  int64    `json:"inputTokens"`
			OutputTokens int64    `json:"outputTokens"`
			TotalTokens  int64    `json:"totalTokens"`
			Cost         *float64 `json:"cost"`
		} `json:"usage"`
		// status_message
		Status *struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"status"`
	} `json:"update"`
}

func decodeGooseUpdate(params []byte) (decoded, error) {
	var g gooseUpdate
	if err := json.Unmarshal(params, &g); err != nil {
		return decoded{}, err
	}
	d := decoded{SessionID: g.SessionID, Custom: true}
	if d.SessionID == "" {
		return d, errNoSession
	}
	u := &g.Update
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
		if u.Status == nil {
			return d, nil
		}
		kind := u.Status.Type
		if kind == "" {
			kind = "notice"
		}
		d.Event = &goose.Notification{Kind: kind, Message: u.Status.Message}
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

// rawJSON encodes a value decoded into any, nil for nil.
func rawJSON(v any) json.RawMessage {
	if v == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return b
}

// toolText joins the text blocks of a tool call's content.
func toolText(items json.RawMessage) (string, error) {
	if items == nil {
		return "", nil
	}
	var content []acpsdk.ToolCallContent
	if err := json.Unmarshal(items, &content); err != nil {
		return "", err
	}
	var parts []string
	for _, c := range content {
		if c.Content != nil && c.Content.Content.Text != nil {
			parts = append(parts, c.Content.Content.Text.Text)
		}
	}
	return strings.Join(parts, "\n"), nil
}
