package rest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/adk2goose/goose-operator/sidecar/goose"
)

// decoder turns the MessageEvent frames of one /reply stream into
// goose.Events. It carries what spans frames: the last token state (usage is
// reported only when it changed), tool names (a toolResponse does not repeat
// the name of its call) and an Error waiting for the Finish that follows it.
type decoder struct {
	lastTS    wireTokenState
	toolNames map[string]string
	agentErr  *goose.AgentError
}

// feed decodes one `data:` payload and appends the resulting events to out.
// done reports the end of the reply; err is then non-nil when goose reported
// an error (*goose.AgentError) and nil after a plain Finish.
func (d *decoder) feed(data []byte, out []goose.Event) (_ []goose.Event, done bool, err error) {
	var ev wireEvent
	if err := json.Unmarshal(data, &ev); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && !decodedTypes[ev.Type] {
			// A variant this client skips, whose fields have other types
			// than the ones it reads: nothing of it is used.
			return out, false, nil
		}
		return out, true, fmt.Errorf("failed to decode reply event: %w", err)
	}
	switch ev.Type {
	case "Ping":
		// Heartbeat every 500 ms (reference §3 framing); carries nothing.
	case "Message":
		// token_state is read from the session DB when the event is sent, so
		// a change reflects provider calls before this message's content.
		out = d.tokenState(ev.TokenState, out)
		var err error
		if out, err = d.message(&ev.Message, out); err != nil {
			return out, true, err
		}
	case "MessageUsage":
		// 1.41 only: one provider call's usage, without session totals.
		if u := ev.Usage; u != nil {
			last := goose.Usage{
				InputTokens:  deref(u.InputTokens),
				OutputTokens: deref(u.OutputTokens),
				TotalTokens:  deref(u.TotalTokens),
				Cost:         copyFloat(u.Cost),
			}
			out = append(out, &goose.UsageUpdate{Last: last.Normalized()})
		}
	case "Notification":
		out = append(out, notification(ev.RequestID, &ev.Message.wireServerNotification))
	case "Error":
		// goosed follows an agent error with Finish carrying the final token
		// state; early setup failures send Error alone (reference §3). Hold
		// the error until one of the two endings.
		d.agentErr = &goose.AgentError{Message: ev.Error}
	case "Finish":
		out = d.tokenState(ev.TokenState, out)
		if d.agentErr != nil {
			return out, true, d.agentErr
		}
		out = append(out, &goose.Finish{Reason: ev.Reason})
		return out, true, nil
	default:
		// UpdateConversation, ActiveRequests and variants added by later
		// versions do not concern a streaming consumer.
	}
	return out, false, nil
}

// decodedTypes are the MessageEvent variants feed reads.
var decodedTypes = map[string]bool{"Ping": true, "Message": true, "MessageUsage": true, "Notification": true, "Error": true, "Finish": true}

// message maps the content items of one Message.
func (d *decoder) message(msg *wireEventMessage, out []goose.Event) ([]goose.Event, error) {
	id := ""
	if msg.ID != nil {
		id = *msg.ID
	}
	for i := range msg.Content {
		c := &msg.Content[i]
		switch c.Type {
		case "text":
			// The user's own message is echoed only on the slash-command
			// path; it is not part of the reply.
			if msg.Role == "assistant" && c.Text != "" {
				out = append(out, &goose.TextDelta{MessageID: id, Text: c.Text})
			}
		case "thinking":
			if c.Thinking != "" {
				out = append(out, &goose.ThinkingDelta{MessageID: id, Text: c.Thinking})
			}
		case "toolRequest":
			out = append(out, d.toolRequest(c))
		case "toolResponse":
			out = append(out, d.toolResponse(c))
		case "actionRequired":
			var a wireActionRequired
			if len(c.Data) > 0 {
				if err := json.Unmarshal(c.Data, &a); err != nil {
					return out, fmt.Errorf("failed to decode action request: %w", err)
				}
			}
			// Elicitations are answered with a user message, which this
			// interface has no event for; only tool confirmations map.
			if a.ActionType == "toolConfirmation" {
				ar := &goose.ApprovalRequest{ID: a.ID, ToolName: a.ToolName, Arguments: cloneRaw(a.Arguments)}
				if a.Prompt != nil {
					ar.Prompt = *a.Prompt
				}
				out = append(out, ar)
			}
		case "systemNotification":
			kind := "notice"
			if c.NotificationType == "progressMessage" {
				kind = "progress"
			}
			out = append(out, &goose.Notification{Kind: kind, Message: c.Msg})
		default:
			// image, redactedThinking, frontendToolRequest, legacy
			// toolConfirmationRequest: nothing the ADK side can show.
		}
	}
	return out, nil
}

func (d *decoder) toolRequest(c *wireContent) *goose.ToolRequest {
	tr := &goose.ToolRequest{ID: c.ID}
	if c.ToolCall != nil && c.ToolCall.Status == "success" {
		var call wireToolCall
		if json.Unmarshal(c.ToolCall.Value, &call) == nil {
			tr.Name = call.Name
			tr.Arguments = cloneRaw(call.Arguments)
		}
	}
	if tr.Name != "" {
		if d.toolNames == nil {
			d.toolNames = make(map[string]string)
		}
		d.toolNames[c.ID] = tr.Name
	}
	return tr
}

func (d *decoder) toolResponse(c *wireContent) *goose.ToolResponse {
	resp := &goose.ToolResponse{ID: c.ID, Name: d.toolNames[c.ID]}
	r := c.ToolResult
	switch {
	case r == nil:
	case r.Status == "error":
		resp.IsError, resp.Text = true, r.Error
	default:
		var res wireCallToolResult
		v := bytes.TrimSpace(r.Value)
		if len(v) > 0 && v[0] == '[' {
			// tool_result_serde accepts a bare content array (reference §3).
			_ = json.Unmarshal(v, &res.Content)
		} else {
			_ = json.Unmarshal(v, &res)
		}
		resp.IsError = res.IsError
		resp.Structured = cloneRaw(res.StructuredContent)
		var sb strings.Builder
		for _, item := range res.Content {
			var t wireTextContent
			if json.Unmarshal(item, &t) == nil && t.Type == "text" {
				if sb.Len() > 0 {
					sb.WriteByte('\n')
				}
				sb.WriteString(t.Text)
			}
		}
		resp.Text = sb.String()
	}
	return resp
}

// tokenState emits a UsageUpdate when the state differs from the last one
// seen. Values come from goose's session DB at each event and only change
// when a provider call reports usage (reference §3 TokenState).
func (d *decoder) tokenState(ts *wireTokenState, out []goose.Event) []goose.Event {
	if ts == nil || tokenStateEqual(ts, &d.lastTS) {
		return out
	}
	d.lastTS = *ts
	d.lastTS.AccumulatedCost = copyFloat(ts.AccumulatedCost)
	return append(out, &goose.UsageUpdate{
		Last: goose.Usage{InputTokens: ts.InputTokens, OutputTokens: ts.OutputTokens, TotalTokens: ts.TotalTokens}.Normalized(),
		Accumulated: goose.Usage{
			InputTokens:  ts.AccumulatedInputTokens,
			OutputTokens: ts.AccumulatedOutputTokens,
			TotalTokens:  ts.AccumulatedTotalTokens,
			Cost:         copyFloat(ts.AccumulatedCost),
		}.Normalized(),
		HasAccumulated: true,
	})
}

func tokenStateEqual(a, b *wireTokenState) bool {
	ac, bc := a.AccumulatedCost, b.AccumulatedCost
	x, y := *a, *b
	x.AccumulatedCost, y.AccumulatedCost = nil, nil
	if x != y {
		return false
	}
	if ac == nil || bc == nil {
		return ac == nil && bc == nil
	}
	return *ac == *bc
}

// notification maps an MCP ServerNotification forwarded by goosed.
func notification(requestID string, n *wireServerNotification) *goose.Notification {
	out := &goose.Notification{ToolCallID: requestID, Kind: "notice", Message: n.Params.Message}
	switch n.Method {
	case "notifications/progress":
		out.Kind = "progress"
		out.Progress = copyFloat(n.Params.Progress)
		out.Total = copyFloat(n.Params.Total)
	case "notifications/message":
		// Logging: params.data is any JSON; a string is shown as is.
		out.Kind = "message"
		var s string
		if json.Unmarshal(n.Params.Data, &s) == nil {
			out.Message = s
		} else if len(n.Params.Data) > 0 {
			out.Message = string(n.Params.Data)
		}
	}
	return out
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func copyFloat(p *float64) *float64 {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// cloneRaw normalises an absent or null RawMessage to nil. No copy is
// needed: encoding/json already copies RawMessage values out of the frame.
func cloneRaw(r json.RawMessage) json.RawMessage {
	if len(r) == 0 || string(r) == "null" {
		return nil
	}
	return r
}
