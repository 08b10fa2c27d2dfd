package backendtest

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
)

// ServeObserver observes a fake goose serve.
func ServeObserver(s *goosetest.Serve) Observer { return serveObserver{s} }

type serveObserver struct{ s *goosetest.Serve }

func (o serveObserver) Prompts(id string) []string {
	var out []string
	for _, p := range o.s.Prompts() {
		if p.SessionID == id {
			out = append(out, p.Text)
		}
	}
	return out
}

func (o serveObserver) Cancels(id string) int {
	n := 0
	for _, c := range o.s.Cancels() {
		if c.SessionID == id {
			n++
		}
	}
	return n
}

// serveDecisions are goose's permission option ids (goose-acp.md §2.7) in
// goose.Decision terms.
var serveDecisions = map[string]goose.Decision{
	"allow_once": goose.AllowOnce, "allow_always": goose.AlwaysAllow,
	"reject_once": goose.DenyOnce, "reject_always": goose.AlwaysDeny,
}

func (o serveObserver) Approvals(id string) []goose.Decision {
	var out []goose.Decision
	for _, p := range o.s.Permissions() {
		if p.SessionID != id {
			continue
		}
		d := serveDecisions[p.OptionID]
		if p.Outcome == "cancelled" {
			d = goose.CancelDecision
		}
		out = append(out, d)
	}
	return out
}

func (o serveObserver) Accumulated(id string) goose.Usage {
	s, ok := o.s.Session(id)
	if !ok {
		return goose.Usage{}
	}
	return goose.Usage{InputTokens: s.InputTokens, OutputTokens: s.OutputTokens, TotalTokens: s.InputTokens + s.OutputTokens, Cost: s.Cost}
}

// GoosedObserver observes a fake goosed.
func GoosedObserver(g *goosetest.Goosed) Observer { return goosedObserver{g} }

type goosedObserver struct{ g *goosetest.Goosed }

func (o goosedObserver) Prompts(id string) []string {
	var out []string
	for _, r := range o.g.Requests() {
		if r.Method != http.MethodPost || r.Path != "/reply" {
			continue
		}
		var body struct {
			SessionID   string `json:"session_id"`
			UserMessage struct {
				Content []struct{ Type, Text string }
			} `json:"user_message"`
		}
		if json.Unmarshal(r.Body, &body) != nil || body.SessionID != id {
			continue
		}
		var sb strings.Builder
		for _, c := range body.UserMessage.Content {
			sb.WriteString(c.Text)
		}
		out = append(out, sb.String())
	}
	return out
}

func (o goosedObserver) Cancels(id string) int {
	n := 0
	for _, c := range o.g.Cancels() {
		if c.SessionID == id {
			n++
		}
	}
	return n
}

func (o goosedObserver) Approvals(id string) []goose.Decision {
	var out []goose.Decision
	for _, c := range o.g.Confirmations() {
		if c.SessionID == id {
			out = append(out, goose.Decision(c.Action))
		}
	}
	return out
}

func (o goosedObserver) Accumulated(id string) goose.Usage {
	u, ok := o.g.Usage(id)
	if !ok {
		return goose.Usage{}
	}
	return goose.Usage{InputTokens: u.AccumulatedInput, OutputTokens: u.AccumulatedOutput, TotalTokens: u.AccumulatedTotal, Cost: u.AccumulatedCost}
}
