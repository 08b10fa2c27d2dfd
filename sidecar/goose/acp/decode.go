package acp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

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

var errNoSession = errors.New("notification has no sessionId")

// decodeNotification turns one goose notification (session/update or
// _goose/unstable/session/update params) into an Event. It never panics.
func decodeNotification(method string, params []byte) (decoded, error) {
	switch method {
	case methodSessionUpdate:
		return decodeSessionUpdate(params)
	case methodGooseUpdate:
		return decodeGooseUpdate(params)
	default:
		return decoded{}, fmt.Errorf("unexpected notification %q", method)
	}
}

// textChunk is the update goose sends most, one per token while it streams:
// a chunk of the answer (agent_message_chunk) or of its thinking
// (agent_thought_chunk) with text content. Read by the transport's
// rpcMessage and then the SDK's union types, which go through a map at each
// of two levels and then again into the variant, a delta costs 83
// allocations and about 12 µs, the largest cost of the sidecar's goose
// reader. unmarshalTextChunkFrame reads the whole frame once, into the SDK's
// own field types, so a value the SDK rejects is rejected here too: 19
// allocations and about 3 µs (BenchmarkDecodeTextChunk). scanTextChunkFrame,
// tried first, reads goose's own frames without encoding/json.
//
// Names match as encoding/json matches struct fields. The SDK reads its two
// discriminators (sessionUpdate, type) case-sensitively and may keep an
// earlier value of a repeated name, which RFC 8259 leaves to the parser.
// goose writes exact names once; FuzzTextChunkFrameReadsAsDispatch checks
// that both read the same from any frame without repeated or case-variant
// names.
//
// Fields it never uses (Meta here, Result and Error in textChunkFrame) are
// read with the SDK's and rpcMessage's types all the same, so that a frame
// they refuse (an _meta that is not an object, say) is refused here too.
type textChunk struct {
	Meta      map[string]any   `json:"_meta,omitempty"`
	SessionID acpsdk.SessionId `json:"sessionId"`
	Update    struct {
		// Only what messageID reads of it (goose's messageId): a map
		// costs about ten allocations more.
		Meta struct {
			Goose struct {
				MessageID stringOrNothing `json:"messageId"`
			} `json:"goose"`
		} `json:"_meta"`
		Content       acpsdk.ContentBlockText `json:"content"`
		MessageID     *string                 `json:"messageId,omitempty"`
		SessionUpdate string                  `json:"sessionUpdate"`
	} `json:"update"`
}

// textChunkFrame is a whole frame, as rpcMessage reads it, whose params may
// be a text chunk.
type textChunkFrame struct {
	JSONRPC string               `json:"jsonrpc"`
	ID      json.RawMessage      `json:"id,omitempty"`
	Method  string               `json:"method,omitempty"`
	Params  textChunk            `json:"params"`
	Result  json.RawMessage      `json:"result,omitempty"`
	Error   *acpsdk.RequestError `json:"error,omitempty"`
}

// readTextChunkFrame reads a frame that is a session/update notification
// of a text chunk in one pass; ok is false for any other frame, which the
// transport and decodeNotification then read.
func readTextChunkFrame(frame []byte) (_ decoded, ok bool) {
	if d, ok := scanTextChunkFrame(frame); ok {
		return d, true
	}
	if !mayBeTextChunk(frame) {
		return decoded{}, false
	}
	return unmarshalTextChunkFrame(frame)
}

// mayBeTextChunk is false for a frame that cannot name either chunk kind: a
// sessionUpdate of agent_message_chunk or agent_thought_chunk is written
// with "_chunk" in it, unless a \u escape spells some of it (no shorter
// escape stands for any of those letters). goose's other updates (usage,
// tool calls, session info) then skip encoding/json's try.
func mayBeTextChunk(frame []byte) bool {
	return bytes.Contains(frame, []byte("_chunk")) || bytes.Contains(frame, []byte(`\u`))
}

// unmarshalTextChunkFrame is readTextChunkFrame through encoding/json, for
// the frames scanTextChunkFrame leaves.
func unmarshalTextChunkFrame(frame []byte) (_ decoded, ok bool) {
	var f textChunkFrame
	if json.Unmarshal(frame, &f) != nil || f.ID != nil || f.Method != methodSessionUpdate {
		return decoded{}, false
	}
	n := &f.Params
	if n.SessionID == "" || n.Update.Content.Type != "text" {
		return decoded{}, false
	}
	u := &n.Update
	id := string(u.Meta.Goose.MessageID) // as messageID reads it
	if u.MessageID != nil && *u.MessageID != "" {
		id = *u.MessageID
	}
	d := decoded{SessionID: string(n.SessionID)}
	switch u.SessionUpdate {
	case "agent_message_chunk":
		d.Event = &goose.TextDelta{MessageID: id, Text: u.Content.Text}
	case "agent_thought_chunk":
		d.Event = &goose.ThinkingDelta{MessageID: id, Text: u.Content.Text}
	default:
		return decoded{}, false
	}
	return d, true
}

// stringOrNothing is a JSON string, or "" for any other value, as
// metaString reads one.
type stringOrNothing string

func (s *stringOrNothing) UnmarshalJSON(b []byte) error {
	// b is one whole JSON value. A string with no escape and valid UTF-8
	// (encoding/json would replace invalid bytes) is its own content:
	// taken without a second decoder.
	if len(b) >= 2 && b[0] == '"' && bytes.IndexByte(b, '\\') < 0 && utf8.Valid(b) {
		*s = stringOrNothing(b[1 : len(b)-1])
		return nil
	}
	var v string
	if json.Unmarshal(b, &v) != nil {
		v = ""
	}
	*s = stringOrNothing(v)
	return nil
}

// decodeSessionUpdate decodes any session/update through the SDK's types.
func decodeSessionUpdate(params []byte) (decoded, error) {
	var n acpsdk.SessionNotification
	if err := json.Unmarshal(params, &n); err != nil {
		return decoded{}, fmt.Errorf("failed to decode session/update: %w", err)
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
		return decoded{}, fmt.Errorf("failed to decode %s: %w", methodGooseUpdate, err)
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

// What goose's usage notifications mean, whichever reader read them
// (decodeSessionUpdate and decodeGooseUpdate, or scanUpdateFrame):

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
