package identity

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"k8s.io/client-go/rest"
)

// Settings is the sidecar's auth configuration file (adk2goose
// -auth-config-file, JSON), which the operator renders from
// spec.sidecar.auth.
type Settings struct {
	// Mode is ModeToken (also when empty), ModeKubernetes or ModeOIDC.
	Mode       string            `json:"mode,omitempty"`
	Kubernetes *KubernetesConfig `json:"kubernetes,omitempty"`
	OIDC       *OIDCConfig       `json:"oidc,omitempty"`
	// AdminGroups may act for every user (server.Config.AdminGroups).
	AdminGroups []string `json:"adminGroups,omitempty"`
}

// ReadSettings reads a Settings file; unknown fields are refused.
func ReadSettings(path string) (Settings, error) {
	f, err := os.Open(path)
	if err != nil {
		return Settings{}, fmt.Errorf("failed to open auth config: %w", err)
	}
	defer f.Close()
	dec := json.NewDecoder(f)
	dec.DisallowUnknownFields()
	var s Settings
	if err := dec.Decode(&s); err != nil {
		return Settings{}, fmt.Errorf("failed to decode auth config %s: %w", path, err)
	}
	return s, nil
}

// Verifier builds the mode's verifier: nil for ModeToken. The Kubernetes
// mode reaches the API server with the pod's ServiceAccount.
func (s Settings) Verifier(ctx context.Context) (Verifier, error) {
	return s.verifier(ctx, rest.InClusterConfig)
}

// VerifierWithAPI is Verifier for a process outside the agent's pods (the
// operator's activator): the Kubernetes mode reaches the API server with rc.
func (s Settings) VerifierWithAPI(ctx context.Context, rc *rest.Config) (Verifier, error) {
	return s.verifier(ctx, func() (*rest.Config, error) { return rc, nil })
}

func (s Settings) verifier(ctx context.Context, apiConfig func() (*rest.Config, error)) (Verifier, error) {
	switch s.Mode {
	case "", ModeToken:
		return nil, nil
	case ModeKubernetes:
		if s.Kubernetes == nil {
			return nil, fmt.Errorf("failed to configure auth: mode %s needs its kubernetes settings", s.Mode)
		}
		cfg := *s.Kubernetes
		rc, err := apiConfig()
		if err != nil {
			return nil, fmt.Errorf("failed to load the in-cluster API server config: %w", err)
		}
		cfg.REST = rc
		return NewKubernetes(cfg)
	case ModeOIDC:
		if s.OIDC == nil {
			return nil, fmt.Errorf("failed to configure auth: mode %s needs its oidc settings", s.Mode)
		}
		return NewOIDC(ctx, *s.OIDC)
	}
	return nil, fmt.Errorf("failed to configure auth: unknown mode %q (want %s, %s or %s)", s.Mode, ModeToken, ModeKubernetes, ModeOIDC)
}
