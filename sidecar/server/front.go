package server

import (
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"google.golang.org/adk/agent"

	"github.com/adk2goose/goose-operator/sidecar/identity"
	"github.com/adk2goose/goose-operator/sidecar/server/defaults"
)

// This file lends the sidecar's own door and card to a component that
// answers in a pod's place while no pod does (the operator's activator, in
// controllers/activator), so that it authenticates, caps bodies and describes
// the agent exactly as the sidecar would.

// DefaultDescription is the agent card's description when none is given.
const DefaultDescription = "Goose, an open-source AI agent, served as an ADK agent by adk2goose"

// DoorConfig configures Door, with the meaning and defaults of the Config
// fields of the same names.
type DoorConfig struct {
	AuthToken         string
	Identity          identity.Verifier
	CORSOrigins       []string
	MaxMessageBytes   int64
	MaxOtherBodyBytes int64
	BodyReadTimeout   time.Duration
	Logger            *slog.Logger
}

// Door wraps next in the sidecar's middleware up to the handlers: CORS
// (preflights answered), the body read deadline, authentication (the shared
// token or the identity mode's verifier; IsOpenPath routes and preflights
// pass without credentials) and the body caps (413/408 with a JSON
// reason). next sees only authenticated requests, open routes and
// preflights, with bodies read whole.
func Door(next http.Handler, c DoorConfig) http.Handler {
	limits := bodyLimits{message: c.MaxMessageBytes, other: c.MaxOtherBodyBytes, timeout: c.BodyReadTimeout}
	if limits.message <= 0 {
		limits.message = defaults.MaxMessageBytes
	}
	if limits.other <= 0 {
		limits.other = defaults.MaxOtherBytes
	}
	if limits.timeout <= 0 {
		limits.timeout = defaults.BodyReadTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	h := limits.buffer(next)
	h = authenticate(h, c.AuthToken, c.Identity, c.Logger)
	h = limits.readDeadline(h)
	return cors(h, c.CORSOrigins)
}

// IsOpenPath reports the routes served without credentials: the probes
// and the agent card.
func IsOpenPath(path string) bool { return openPaths[path] }

// WriteError answers a JSON error ({"error", "code", "detail"}) as every
// route of the sidecar does.
func WriteError(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	writeJSONError(w, r, status, code, msg)
}

// CardConfig is what the A2A agent card is made of, with the meaning of the
// Config fields of the same names.
type CardConfig struct {
	AppName       string
	Description   string // default DefaultDescription
	Version       string // default "0.0.0"
	PublicBaseURL string
	Identity      identity.Verifier
}

// CardHandler serves the agent card at a2asrv.WellKnownAgentCardPath. The
// card's skills are adka2a's for an agent of that name and description,
// which is what the goose agent is to it.
func CardHandler(c CardConfig) (http.Handler, error) {
	if c.Description == "" {
		c.Description = DefaultDescription
	}
	if c.Version == "" {
		c.Version = "0.0.0"
	}
	a, err := agent.New(agent.Config{Name: c.AppName, Description: c.Description})
	if err != nil {
		return nil, fmt.Errorf("failed to describe agent %s: %w", c.AppName, err)
	}
	card, err := agentCard(c, a)
	if err != nil {
		return nil, err
	}
	cards, err := newCardProducer(card, c.Identity)
	if err != nil {
		return nil, err
	}
	return a2asrv.NewAgentCardHandler(cards), nil
}
