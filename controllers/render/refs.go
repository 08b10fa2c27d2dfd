package render

import (
	"sort"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
)

// RefKind is the kind of object a GooseAgent reads a value from.
type RefKind string

const (
	// KindSecret is a core/v1 Secret.
	KindSecret RefKind = "Secret"
	// KindConfigMap is a core/v1 ConfigMap.
	KindConfigMap RefKind = "ConfigMap"
)

// Ref is one key of a Secret or ConfigMap in the agent's namespace.
type Ref struct {
	Kind RefKind
	Name string
	Key  string
	// Optional refs (only from podTemplate.env with optional: true) may be
	// missing without blocking the agent.
	Optional bool
}

// String is the stable form used in messages and in the config hash.
func (r Ref) String() string { return string(r.Kind) + "/" + r.Name + "#" + r.Key }

// References lists every Secret and ConfigMap key the agent reads, sorted and
// without duplicates. The generated <agent>-adk2goose Secret is not among them.
func References(a *agentsv1alpha1.GooseAgent) []Ref {
	// optional[k] is true only while every use of k is optional.
	optional := map[Ref]bool{}
	add := func(r Ref) {
		k := Ref{Kind: r.Kind, Name: r.Name, Key: r.Key}
		if prev, ok := optional[k]; ok {
			optional[k] = prev && r.Optional
			return
		}
		optional[k] = r.Optional
	}
	secret := func(s agentsv1alpha1.SecretKeyRef) { add(Ref{Kind: KindSecret, Name: s.Name, Key: s.Key}) }
	spec := &a.Spec
	if spec.Provider.APIKeySecretRef != nil {
		secret(*spec.Provider.APIKeySecretRef)
	}
	for _, e := range spec.Provider.Env {
		secret(e.SecretKeyRef)
	}
	if f := spec.InstructionsFrom; f != nil {
		if f.SecretKeyRef != nil {
			secret(*f.SecretKeyRef)
		}
		if f.ConfigMapKeyRef != nil {
			add(Ref{Kind: KindConfigMap, Name: f.ConfigMapKeyRef.Name, Key: f.ConfigMapKeyRef.Key})
		}
	}
	for _, ext := range spec.Extensions {
		for _, e := range ext.Env {
			if e.SecretKeyRef != nil {
				secret(*e.SecretKeyRef)
			}
		}
		for _, h := range ext.HeadersFrom {
			secret(h.SecretKeyRef)
		}
	}
	if t := spec.Telemetry; t != nil {
		for _, h := range t.HeadersFrom {
			secret(h.SecretKeyRef)
		}
	}
	if t := spec.Sidecar.Auth.TokenSecretRef; t != nil {
		secret(*t)
	}
	for _, e := range spec.PodTemplate.Env {
		if e.ValueFrom == nil {
			continue
		}
		opt := func(p *bool) bool { return p != nil && *p }
		if s := e.ValueFrom.SecretKeyRef; s != nil {
			add(Ref{Kind: KindSecret, Name: s.Name, Key: s.Key, Optional: opt(s.Optional)})
		}
		if c := e.ValueFrom.ConfigMapKeyRef; c != nil {
			add(Ref{Kind: KindConfigMap, Name: c.Name, Key: c.Key, Optional: opt(c.Optional)})
		}
	}
	out := make([]Ref, 0, len(optional))
	for k, opt := range optional {
		k.Optional = opt
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// ReferencedNames returns the distinct names of the objects of one kind the
// agent references; it feeds the field index from reference to GooseAgent.
func ReferencedNames(a *agentsv1alpha1.GooseAgent, kind RefKind) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range References(a) {
		if r.Kind == kind && !seen[r.Name] {
			seen[r.Name] = true
			out = append(out, r.Name)
		}
	}
	return out
}
