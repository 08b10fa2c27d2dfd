package activator

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"sync"

	lru "github.com/hashicorp/golang-lru/v2"
	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers/render"
	"github.com/adk2goose/goose-operator/sidecar/identity"
	"github.com/adk2goose/goose-operator/sidecar/server"
)

// door is one agent's authentication and card, as its sidecar has them,
// built from the agent's spec and token.
type door struct {
	// What it was built from: a change of any builds it again.
	uid        types.UID
	generation int64
	token      [sha256.Size]byte

	// handler is the sidecar's door (server.Door) in front of serve.
	handler http.Handler
	// card is the sidecar's agent card handler.
	card http.Handler
}

// doors keeps the doors of the agents called recently; the verifiers'
// caches (reviews, verified tokens) live in them.
type doors struct {
	// mu makes a burst of first requests build one door, and one verifier.
	mu    sync.Mutex
	cache *lru.Cache[types.NamespacedName, *door]
}

func newDoors(size int) (*doors, error) {
	c, err := lru.New[types.NamespacedName, *door](size)
	if err != nil {
		return nil, fmt.Errorf("failed to create the activator's door cache: %w", err)
	}
	return &doors{cache: c}, nil
}

// doorFor is the agent's door, built when its spec or token changed.
func (a *Activator) doorFor(ctx context.Context, ga *agentsv1alpha1.GooseAgent) (*door, error) {
	token, err := a.cfg.Tokens.SidecarToken(ctx, ga)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(token))
	key := types.NamespacedName{Namespace: ga.Namespace, Name: ga.Name}
	a.doors.mu.Lock()
	defer a.doors.mu.Unlock()
	if d, ok := a.doors.cache.Get(key); ok && d.uid == ga.UID && d.generation == ga.Generation && d.token == sum {
		return d, nil
	}
	var v identity.Verifier
	if s := render.AuthSettings(ga); s != nil {
		if v, err = s.VerifierWithAPI(a.ctx, a.cfg.REST); err != nil {
			return nil, fmt.Errorf("failed to set up the %s auth of %s: %w", s.Mode, key, err)
		}
	}
	card, err := server.CardHandler(server.CardConfig{
		AppName: ga.Name, Description: ga.Spec.Description, Version: a.cfg.CardVersion,
		PublicBaseURL: render.RESTEndpoint(ga), Identity: v,
	})
	if err != nil {
		return nil, fmt.Errorf("failed to make the agent card of %s: %w", key, err)
	}
	d := &door{uid: ga.UID, generation: ga.Generation, token: sum, card: card}
	d.handler = server.Door(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { a.serve(w, r, d) }), server.DoorConfig{
		AuthToken:   token,
		Identity:    v,
		CORSOrigins: ga.Spec.Sidecar.CORSAllowedOrigins,
		Logger:      a.slog.With("agent", key.String()),
	})
	a.doors.cache.Add(key, d)
	return d, nil
}
