package server

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"maps"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"github.com/a2aproject/a2a-go/v2/a2asrv/taskstore"
	"google.golang.org/adk/agent"
	"google.golang.org/adk/runner"
	adka2a "google.golang.org/adk/server/adka2a/v2"
	"google.golang.org/adk/session"
	"google.golang.org/genai"

	"github.com/adk2goose/goose-operator/sidecar/budget"
	"github.com/adk2goose/goose-operator/sidecar/gooseagent"
	"github.com/adk2goose/goose-operator/sidecar/identity"
	"github.com/adk2goose/goose-operator/sidecar/internal/adkcompat"
	"github.com/adk2goose/goose-operator/sidecar/internal/waitgroup"

	"net/http"
)

// a2aOutputMode is one artifact per non-partial ADK event: its partial
// deltas are chunks of that artifact (append, no lastChunk) and the event
// itself replaces them with the whole content and lastChunk=true. Every A2A
// client then reads partial vs final from the A2A flags alone: adk-go's
// remoteagent and ADK for TypeScript (partial = append || !lastChunk), and
// plain SDK clients that fold artifact chunks. adka2a's default
// (artifact-per-run) marks finals only through adk_partial metadata, which
// ADK TS reads from the artifact, not the event: it took every final as a
// partial, stored nothing, and showed the text twice plus the "{}" of the
// reset chunk that also stayed in the task.
const a2aOutputMode = adka2a.OutputArtifactPerEvent

// A2A paths, the same as adk-go's `web a2a` launcher.
const (
	A2APathV1  = "/a2a/v1/invoke" // A2A 1.0 JSON-RPC
	A2APathV03 = "/a2a/invoke"    // A2A 0.3 JSON-RPC
)

// agentCard is the card of agent a, served as c describes it.
func agentCard(c CardConfig, a agent.Agent) (*a2a.AgentCard, error) {
	base, err := url.Parse(strings.TrimRight(c.PublicBaseURL, "/"))
	if err != nil || base.Scheme == "" || base.Host == "" {
		return nil, fmt.Errorf("failed to parse public base URL %q: want scheme://host[:port]", c.PublicBaseURL)
	}
	b := base.String()
	card := &a2a.AgentCard{
		Name:               c.AppName,
		Description:        c.Description,
		Version:            c.Version,
		DefaultInputModes:  []string{"text/plain"},
		DefaultOutputModes: []string{"text/plain"},
		Capabilities:       a2a.AgentCapabilities{Streaming: true},
		Skills:             adka2a.BuildAgentSkills(a),
		// The 1.0 interface comes first: a2av0's producer derives the 0.3
		// url/preferredTransport fields from the 0.3 entry.
		SupportedInterfaces: []*a2a.AgentInterface{
			{URL: b + A2APathV1, ProtocolBinding: a2a.TransportProtocolJSONRPC, ProtocolVersion: a2a.Version},
			{URL: b + A2APathV03, ProtocolBinding: a2a.TransportProtocolJSONRPC, ProtocolVersion: a2av0.Version},
		},
	}
	if c.Identity != nil {
		card.SecurityRequirements = a2a.SecurityRequirementsOptions{{securitySchemeName: {}}}
	}
	return card, nil
}

// securitySchemeName names the card's one security scheme.
const securitySchemeName a2a.SecuritySchemeName = "adk2goose"

// cardProducer serves a2av0's card (the union of the A2A 0.3 and 1.0
// fields, "security" beside "securityRequirements") with the security
// scheme written in both versions' shapes at once: a2av0 writes only the
// 0.3 one, which the 1.0 parser of a2a-go v2.3.1 (adk-go's remoteagent)
// rejects, and the 1.0 one alone breaks 0.3 clients. Each parser ignores
// the other's keys.
type cardProducer struct {
	a2asrv.AgentCardProducer
	scheme json.RawMessage // nil: no scheme
}

func newCardProducer(card *a2a.AgentCard, v identity.Verifier) (*cardProducer, error) {
	p := &cardProducer{AgentCardProducer: a2av0.NewStaticAgentCardProducer(card)}
	if v == nil {
		return p, nil
	}
	sc := v.Scheme()
	var union map[string]any
	if sc.OpenIDConnectURL != "" {
		v1 := map[string]any{"openIdConnectUrl": sc.OpenIDConnectURL, "description": sc.Description}
		union = map[string]any{"type": "openIdConnect", "openIdConnectSecurityScheme": v1}
		maps.Copy(union, v1)
	} else {
		v1 := map[string]any{"scheme": "Bearer", "description": sc.Description}
		union = map[string]any{"type": "http", "httpAuthSecurityScheme": v1}
		maps.Copy(union, v1)
	}
	b, err := json.Marshal(map[a2a.SecuritySchemeName]any{securitySchemeName: union})
	if err != nil {
		return nil, fmt.Errorf("failed to encode the card's security scheme: %w", err)
	}
	p.scheme = b
	return p, nil
}

// CardJSON implements a2asrv.AgentCardJSONProducer.
func (p *cardProducer) CardJSON(ctx context.Context) ([]byte, error) {
	b, err := p.AgentCardProducer.(a2asrv.AgentCardJSONProducer).CardJSON(ctx)
	if err != nil || p.scheme == nil {
		return b, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return nil, fmt.Errorf("failed to decode the agent card: %w", err)
	}
	fields["securitySchemes"] = p.scheme
	return json.Marshal(fields)
}

func (s *Server) mountA2A(mux *http.ServeMux) error {
	card, err := agentCard(CardConfig{
		AppName: s.cfg.AppName, Description: s.cfg.Description, Version: s.cfg.Version,
		PublicBaseURL: s.cfg.PublicBaseURL, Identity: s.cfg.Identity,
	}, s.agent)
	if err != nil {
		return err
	}
	runnerCfg := runner.Config{AppName: s.cfg.AppName, Agent: s.agent, SessionService: s.adkSessions}
	s.a2aExec = &drainingExecutor{
		// Streaming calls: server-side SSE mode forwards goose's deltas as
		// partial artifact updates (the client's mode does not matter).
		streaming: adka2a.NewExecutor(adka2a.ExecutorConfig{
			RunnerConfig: runnerCfg,
			RunConfig:    agent.RunConfig{StreamingMode: agent.StreamingModeSSE},
			OutputMode:   a2aOutputMode,
		}),
		// Unary calls get no partials and the turn's usage on the task
		// metadata, where the ADK client reads it from a Task result.
		unary: adka2a.NewExecutor(adka2a.ExecutorConfig{
			RunnerConfig:         runnerCfg,
			RunConfig:            agent.RunConfig{StreamingMode: agent.StreamingModeNone},
			AfterEventCallback:   captureUsage,
			AfterExecuteCallback: attachUsage,
			OutputMode:           a2aOutputMode,
		}),
		stop:     s.stop,
		control:  s.control,
		appName:  s.cfg.AppName,
		turns:    s.turns,
		turnWait: s.cfg.TurnWait,
		budget:   s.budget,
		sessions: s.sessions,
	}
	// The task store a2asrv would make by default, kept to answer peers'
	// owner queries.
	s.tasks = taskstore.NewInMemory(&taskstore.InMemoryStoreConfig{Authenticator: a2asrv.NewTaskStoreAuthenticator()})
	h := a2asrv.NewHandler(s.a2aExec, a2asrv.WithLogger(s.log),
		a2asrv.WithTaskStore(callerTasks{Store: s.tasks, admin: s.isAdmin}),
		a2asrv.WithCallInterceptors(callerInterceptor{}))
	cards, err := newCardProducer(card, s.cfg.Identity)
	if err != nil {
		return err
	}
	mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewAgentCardHandler(cards))
	mux.Handle(A2APathV1, a2asrv.NewJSONRPCHandler(h))
	mux.Handle(A2APathV03, a2av0.NewJSONRPCHandler(h))
	return nil
}

// drainingExecutor wraps the ADK executor: a2asrv runs executions detached
// from their HTTP request, so this links them to the server's stop context
// and counts them, letting shutdown wait for or end them.
type drainingExecutor struct {
	streaming, unary *adka2a.Executor
	stop             context.Context
	wg               sync.WaitGroup
	// control and appName let Cancel reach a goose reply held at a tool
	// approval, which no running execution owns.
	control *gooseagent.Controller
	appName string
	// turns gives an execution its context's session turn, as REST runs
	// get theirs (turnGate).
	turns    *turnGate
	turnWait time.Duration
	budget   *budget.Budget
	sessions *sessionService
}

// pick chooses the executor by the A2A method that started the execution.
func (d *drainingExecutor) pick(ctx context.Context) *adka2a.Executor {
	if cc, ok := a2asrv.CallContextFrom(ctx); ok && cc.Method() == "SendMessage" {
		return d.unary
	}
	return d.streaming
}

var (
	_ a2asrv.AgentExecutor         = (*drainingExecutor)(nil)
	_ a2asrv.AgentExecutionCleaner = (*drainingExecutor)(nil)
)

func (d *drainingExecutor) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return d.track(ctx, func(ctx context.Context) iter.Seq2[a2a.Event, error] {
		if evs := refuseOverBudget(d.budget, ec); evs != nil {
			return eventsOf(evs)
		}
		return func(yield func(a2a.Event, error) bool) {
			key := gooseagent.SessionKey{AppName: d.appName, UserID: adkcompat.A2AUserID(ctx, ec.ContextID), SessionID: ec.ContextID}
			release, err := d.turns.acquire(ctx, key, d.turnWait)
			if err != nil {
				yield(nil, fmt.Errorf("failed to start a turn in context %s: %w", ec.ContextID, err))
				return
			}
			defer release()
			ctx = runContext(ctx, key.AppName, key.UserID, key.SessionID)
			stopped := false
			for ev, err := range progressAsStatus(d.pick(ctx).Execute(context.WithValue(ctx, usageKey{}, &usageHolder{}), ec)) {
				if !yield(ev, err) {
					stopped = true
					break
				}
			}
			// The turn ends when the session's writes have (sessionService).
			if err := d.sessions.flush(sessionID{key.AppName, key.UserID, key.SessionID}); err != nil && !stopped {
				yield(nil, err)
			}
		}
	})
}

// Cancel ends the task canceled. A running execution is stopped by a2asrv
// (its context ends, which cancels the goose reply); a task waiting in
// input-required has no execution, so its held goose reply is denied and
// cancelled here.
func (d *drainingExecutor) Cancel(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return d.track(ctx, func(ctx context.Context) iter.Seq2[a2a.Event, error] {
		if t := ec.StoredTask; t != nil && t.Status.State == a2a.TaskStateInputRequired && t.Status.Message != nil {
			var ids []string
			if parts, err := adka2a.ToGenAIParts(t.Status.Message.Parts); err == nil {
				for _, p := range parts {
					if p.FunctionCall != nil {
						ids = append(ids, p.FunctionCall.ID)
					}
				}
			}
			key := gooseagent.SessionKey{AppName: d.appName, UserID: adkcompat.A2AUserID(ctx, ec.ContextID), SessionID: ec.ContextID}
			// Bounded: a turn of the session still winding down holds its lock.
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			d.control.CancelConfirmation(cctx, key, ids, "cancelled with A2A task "+string(ec.TaskID))
			cancel()
		}
		return d.streaming.Cancel(ctx, ec)
	})
}

// progressAsStatus turns the artifact updates adka2a makes of goose progress
// notifications (partial thought events tagged goose_notification) into
// non-terminal WORKING status updates carrying the text: that is what A2A
// clients show as progress, and adk-go's client turns them into partial
// thought events. Everything else passes through.
//
// In artifact-per-event mode a notification can open the chunk artifact the
// next deltas append to; that artifact never reached the client nor the
// task store (which fails an append to an unknown artifact), so the first
// delta that does reach them starts it instead of appending.
func progressAsStatus(seq iter.Seq2[a2a.Event, error]) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		unsent := map[a2a.ArtifactID]bool{}
		for ev, err := range seq {
			if au, ok := ev.(*a2a.TaskArtifactUpdateEvent); ok && err == nil {
				switch {
				case isNotification(au):
					if !au.Append {
						unsent[au.Artifact.ID] = true
					}
					ev = notificationStatus(au)
				case unsent[au.Artifact.ID]:
					delete(unsent, au.Artifact.ID)
					au.Append = false
				}
			}
			if !yield(ev, err) {
				return
			}
		}
	}
}

func notificationStatus(au *a2a.TaskArtifactUpdateEvent) *a2a.TaskStatusUpdateEvent {
	var parts []*a2a.Part
	for _, p := range au.Artifact.Parts {
		if t := p.Text(); t != "" {
			parts = append(parts, a2a.NewTextPart(t))
		}
	}
	su := a2a.NewStatusUpdateEvent(au, a2a.TaskStateWorking, a2a.NewMessage(a2a.MessageRoleAgent, parts...))
	// Per-event mode puts the ADK metadata on the artifact; the legacy mode
	// on the event. The status update has only the one.
	su.Metadata = maps.Clone(au.Metadata)
	if su.Metadata == nil {
		su.Metadata = map[string]any{}
	}
	maps.Copy(su.Metadata, au.Artifact.Metadata)
	return su
}

func isNotification(au *a2a.TaskArtifactUpdateEvent) bool {
	for _, meta := range []map[string]any{au.Artifact.Metadata, au.Metadata} {
		if cm, ok := meta[adka2a.ToA2AMetaKey("custom_metadata")].(map[string]any); ok {
			if _, ok := cm["goose_notification"]; ok {
				return true
			}
		}
	}
	return false
}

func (d *drainingExecutor) Cleanup(ctx context.Context, ec *a2asrv.ExecutorContext, res a2a.SendMessageResult, err error) {
	d.streaming.Cleanup(ctx, ec, res, err)
}

func (d *drainingExecutor) track(ctx context.Context, run func(context.Context) iter.Seq2[a2a.Event, error]) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		d.wg.Add(1)
		defer d.wg.Done()
		ctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		unlink := context.AfterFunc(d.stop, func() { cancel(context.Cause(d.stop)) })
		defer unlink()
		for ev, err := range run(ctx) {
			if !yield(ev, err) {
				return
			}
		}
	}
}

func (d *drainingExecutor) wait(ctx context.Context) error {
	if d == nil {
		return nil
	}
	if err := waitgroup.Wait(ctx, &d.wg); err != nil {
		return fmt.Errorf("failed to wait for A2A executions: %w", err)
	}
	return nil
}

type usageKey struct{}

type usageHolder struct{ usage map[string]any }

// captureUsage keeps the last usage an ADK event of the execution carried.
func captureUsage(ctx adka2a.ExecutorContext, ev *session.Event, _ *a2a.TaskArtifactUpdateEvent) error {
	h, ok := ctx.Value(usageKey{}).(*usageHolder)
	if !ok || ev == nil || ev.UsageMetadata == nil {
		return nil
	}
	// A plain map survives the task store's deep copy, a genai struct may not.
	// Usage is best effort: should the copy fail (numbers cannot), the event
	// still goes out and the task keeps the usage captured before, because an
	// error here would fail the whole task.
	if m, err := usageMap(ev.UsageMetadata); err == nil {
		h.usage = m
	}
	return nil
}

// usageMap is u as a JSON object.
func usageMap(u *genai.GenerateContentResponseUsageMetadata) (map[string]any, error) {
	b, err := json.Marshal(u)
	if err != nil {
		return nil, fmt.Errorf("failed to encode usage: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("failed to decode usage: %w", err)
	}
	return m, nil
}

// attachUsage copies the captured usage onto the final status update, whose
// metadata a2a-go merges into the task's.
func attachUsage(ctx adka2a.ExecutorContext, final *a2a.TaskStatusUpdateEvent, _ error) error {
	h, ok := ctx.Value(usageKey{}).(*usageHolder)
	if !ok || h.usage == nil || final == nil {
		return nil
	}
	if final.Metadata == nil {
		final.Metadata = map[string]any{}
	}
	final.Metadata["adk_usage_metadata"] = h.usage
	return nil
}
