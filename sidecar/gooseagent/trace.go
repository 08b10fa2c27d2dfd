package gooseagent

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/adk2goose/goose-operator/sidecar/goose"
)

// TracerName is the instrumentation scope of the agent's spans.
const TracerName = "github.com/adk2goose/goose-operator/sidecar/gooseagent"

// Span names. They nest under ADK's "invoke_agent <name>" span:
//
//	goose.session          finding, resuming or starting the goose session
//	goose.prompt           one goose reply (ACP session/prompt, REST /reply) within a turn
//	  goose.tool_call      a tool call, from goose's request to its result
//	    goose.approval_wait  a tool approval, from goose's question to the client's answer
const (
	SpanSession      = "goose.session"
	SpanPrompt       = "goose.prompt"
	SpanToolCall     = "goose.tool_call"
	SpanApprovalWait = "goose.approval_wait"
)

// AttrTimeToFirstEventMS is set on the goose.prompt span as it ends: the
// turn's time from its start to its first event, in milliseconds.
const AttrTimeToFirstEventMS = "adk2goose.time_to_first_event_ms"

// Attributes on the agent's spans. gen_ai.conversation.id is what adk-go's
// debug trace store indexes sessions by (adkrest /debug/trace/session).
var (
	attrConversation = attribute.Key("gen_ai.conversation.id")
	attrGooseSession = attribute.Key("goose.session_id")
	attrFlavor       = attribute.Key("goose.flavor")
	attrToolName     = attribute.Key("gen_ai.tool.name")
	attrToolCallID   = attribute.Key("gen_ai.tool.call.id")
	attrFirstEventMS = attribute.Key(AttrTimeToFirstEventMS)
	attrDecision     = attribute.Key("adk2goose.approval.decision")
	attrOutcome      = attribute.Key("adk2goose.approval.outcome")
)

// turnSpans are the open spans of one turn. tools outlive the turn when it
// pauses at an approval: the pausedReply carries them to the answering turn.
type turnSpans struct {
	prompt    trace.Span
	promptCtx context.Context
	tools     map[string]trace.Span
	// firstEvent is when the turn's first event went out while prompt was
	// open. endPrompt puts it on the span: what a span is given before it
	// ends is seen only once it ends, and given then, a stream that lasts
	// minutes does not hold the span's grown attribute and event lists.
	firstEvent time.Time
}

func (t *turn) tracer() trace.Tracer { return t.g.tracer }

// traceSession runs open inside a goose.session span.
func (t *turn) traceSession(open func() error) error {
	_, span := t.tracer().Start(t.ic, SpanSession, trace.WithAttributes(
		attrConversation.String(t.key.SessionID), attrFlavor.String(string(t.g.cfg.Backend.Flavor()))))
	err := open()
	span.SetAttributes(attrGooseSession.String(t.entry.gooseID))
	endSpan(span, err)
	return err
}

// startPrompt opens the turn's goose.prompt span; endPrompt closes it and
// every tool span the turn still holds (unless the turn paused).
func (t *turn) startPrompt() {
	t.spans.promptCtx, t.spans.prompt = t.tracer().Start(t.ic, SpanPrompt, trace.WithAttributes(
		attrConversation.String(t.key.SessionID), attrGooseSession.String(t.gooseID),
		attrFlavor.String(string(t.g.cfg.Backend.Flavor()))))
}

func (t *turn) endPrompt() {
	if t.spans.prompt == nil {
		return
	}
	if !t.paused {
		for id, s := range t.spans.tools {
			s.SetStatus(codes.Error, "the reply ended before the tool returned")
			s.End()
			delete(t.spans.tools, id)
		}
	}
	if t.errorCode != "" {
		t.spans.prompt.SetStatus(codes.Error, t.errorCode)
	}
	attrs := []attribute.KeyValue{attribute.Bool("adk2goose.awaiting_confirmation", t.paused)}
	if at := t.spans.firstEvent; !at.IsZero() {
		t.spans.prompt.AddEvent("first_event", trace.WithTimestamp(at))
		attrs = append(attrs, attrFirstEventMS.Float64(float64(t.firstEvent)/float64(time.Millisecond)))
	}
	t.spans.prompt.SetAttributes(attrs...)
	t.spans.prompt.End()
}

// traceFirstEvent notes the turn's first event, at, for the prompt span
// (endPrompt).
func (t *turn) traceFirstEvent(at time.Time) {
	if t.spans.prompt != nil {
		t.spans.firstEvent = at
	}
}

func (t *turn) toolStarted(e *goose.ToolRequest) {
	if t.spans.prompt == nil {
		return
	}
	_, s := t.tracer().Start(t.spans.promptCtx, SpanToolCall, trace.WithAttributes(
		attrToolName.String(e.Name), attrToolCallID.String(e.ID)))
	if t.spans.tools == nil {
		t.spans.tools = map[string]trace.Span{}
	}
	t.spans.tools[e.ID] = s
}

func (t *turn) toolFinished(e *goose.ToolResponse) {
	s, ok := t.spans.tools[e.ID]
	if !ok {
		return
	}
	if e.IsError {
		s.SetStatus(codes.Error, "the tool returned an error")
	}
	s.End()
	delete(t.spans.tools, e.ID)
}

// startApprovalWait opens the goose.approval_wait span under the tool's
// span (or the prompt's) and hands the open tool spans to p.
func (t *turn) startApprovalWait(p *pausedReply, ar *goose.ApprovalRequest) {
	if t.spans.prompt == nil {
		return
	}
	parent := t.spans.promptCtx
	if s, ok := t.spans.tools[ar.ID]; ok {
		parent = trace.ContextWithSpan(parent, s)
	}
	_, p.wait = t.tracer().Start(parent, SpanApprovalWait, trace.WithAttributes(
		attrToolName.String(ar.ToolName), attrToolCallID.String(ar.ID)))
	p.tools, t.spans.tools = t.spans.tools, nil
}

// resumeFrom takes over the tool spans of the reply the turn continues.
func (t *turn) resumeFrom(p *pausedReply, decision goose.Decision) {
	t.spans.tools, p.tools = p.tools, nil
	if p.wait != nil {
		p.wait.SetAttributes(attrDecision.String(string(decision)))
	}
}

// endWait ends a resolved approval's span; tool spans nobody took over end
// with it.
func (p *pausedReply) endWait(outcome string) {
	if p.wait != nil {
		p.wait.SetAttributes(attrOutcome.String(outcome))
		p.wait.End()
	}
	for _, s := range p.tools {
		s.SetStatus(codes.Error, "the tool call was not approved")
		s.End()
	}
	p.tools = nil
}

func endSpan(s trace.Span, err error) {
	if err != nil {
		s.RecordError(err)
		s.SetStatus(codes.Error, err.Error())
	}
	s.End()
}
