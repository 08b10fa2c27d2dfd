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

// decodeSessionUpdate decodes any session/update through the SDK's types.
func decodeSessionUpdate(params []byte) (decoded, error) {
	var n acpsdk.SessionNotification
	if err := json.Unmarshal(params, &n); err != nil {
		return decoded{}, err
	}
	d := decoded{SessionID: string(n.SessionId)}
	if d.SessionID == "" {
		return d, errNoSession
	}
	u := n.Update
	switch {
	case u.AgentMessageChunk != nil:
		c := u.AgentMessageChunk
		if c.Content.Text != nil {
			d.Event = &goose.TextDelta{MessageID: messageID(c.MessageId, c.Meta), Text: c.Content.Text.Text}
		}
	case u.AgentThoughtChunk != nil:
		c := u.AgentThoughtChunk
		if c.Content.Text != nil {
			d.Event = &goose.ThinkingDelta{MessageID: messageID(c.MessageId, c.Meta), Text: c.Content.Text.Text}
		}
	case u.ToolCall != nil:
		tc := u.ToolCall
		// goose's first tool_call omits status (pending) and kind (§2.6);
		// the tool's real name is in _meta.goose.toolCall.toolName.
		name := metaString(tc.Meta, "goose", "toolCall", "toolName")
		if name == "" {
			name = tc.Title
		}
		d.ToolName = name
		d.Event = &goose.ToolRequest{ID: string(tc.ToolCallId), Name: name, Arguments: rawJSON(tc.RawInput)}
		// A tool_call that already carries a final status (session/load
		// replays) has no later update; nothing more to report here.
	case u.ToolCallUpdate != nil:
		tu := u.ToolCallUpdate
		// Only completed/failed carry the result (§2.6); title-only updates
		// (the async LLM title) and in_progress report nothing.
		if tu.Status == nil || (*tu.Status != acpsdk.ToolCallStatusCompleted && *tu.Status != acpsdk.ToolCallStatusFailed) {
			return d, nil
		}
		d.Event = &goose.ToolResponse{
			ID:         string(tu.ToolCallId),
			Name:       metaString(tu.Meta, "goose", "toolCall", "toolName"),
			Text:       toolText(tu.Content),
			IsError:    *tu.Status == acpsdk.ToolCallStatusFailed,
			Structured: rawJSON(tu.RawOutput),
		}
	case u.SessionInfoUpdate != nil:
		if g, ok := u.SessionInfoUpdate.Meta["goose"].(map[string]any); ok {
			if v, present := g["activeRunId"]; present {
				id, _ := v.(string) // null: the run ended
				d.ActiveRun = &id
			}
		}
	case u.UsageUpdate != nil:
		uu := u.UsageUpdate
		var cost *float64
		if uu.Cost != nil {
			c := uu.Cost.Amount
			cost = &c
		}
		d.stableUsage(int64(uu.Used), int64(uu.Size), cost)
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

// messageID prefers the ACP field and falls back to goose's
// _meta.goose.messageId, where goose puts it (§2.6).
func messageID(id *string, meta map[string]any) string {
	if id != nil && *id != "" {
		return *id
	}
	return metaString(meta, "goose", "messageId")
}

func metaString(m map[string]any, path ...string) string {
	var cur any = m
	for _, k := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return ""
		}
		cur = mm[k]
	}
	s, _ := cur.(string)
	return s
}

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

func toolText(content []acpsdk.ToolCallContent) string {
	var parts []string
	for _, c := range content {
		if c.Content != nil && c.Content.Content.Text != nil {
			parts = append(parts, c.Content.Content.Text.Text)
		}
	}
	return strings.Join(parts, "\n")
}
