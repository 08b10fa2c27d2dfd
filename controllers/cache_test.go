package controllers_test

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/adk2goose/goose-operator/controllers"
	"github.com/adk2goose/goose-operator/controllers/render"
	"github.com/adk2goose/goose-operator/internal/testing/poll"
)

// TestCacheHoldsNoForeignValues: the manager's cache holds the agent's own
// children, never a Secret or ConfigMap of another application, nor the
// values of the Secrets an agent references (those are read from the
// apiserver when rendering; only their names and versions are watched).
func TestCacheHoldsNoForeignValues(t *testing.T) {
	needEnv(t)
	h := startManager(t, harnessOpts{})
	ns := newNamespace(t, "cache")
	ctx := context.Background()
	c := loadCase(t, "approve")
	createCase(t, c, ns)
	waitSTS(t, ns, c.Agent.Name)

	foreign := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "payments-db", Namespace: ns}, StringData: map[string]string{"password": "hunter2"}}
	if err := env.Client.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	foreignCM := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "payments-config", Namespace: ns}, Data: map[string]string{"k": "v"}}
	if err := env.Client.Create(ctx, foreignCM); err != nil {
		t.Fatal(err)
	}
	// The agent's own generated Secret is in the cache: it is a child.
	own := &corev1.Secret{}
	if err := h.cache.Get(ctx, client.ObjectKey{Namespace: ns, Name: render.SecretName(c.Agent)}, own); err != nil {
		t.Fatalf("the agent's own Secret is not cached: %v", err)
	}
	for _, o := range []client.Object{&corev1.Secret{}, &corev1.ConfigMap{}} {
		for _, name := range []string{foreign.Name, foreignCM.Name, c.Secrets[0].Name} {
			err := h.cache.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, o)
			if !apierrors.IsNotFound(err) {
				t.Errorf("cache Get %T %s = %v, want NotFound: only the agents' children are cached", o, name, err)
			}
		}
	}
	var secrets corev1.SecretList
	if err := h.cache.List(ctx, &secrets, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets.Items {
		if s.Labels[render.LabelManagedBy] != render.ManagedBy {
			t.Errorf("cache holds Secret %s, which the operator does not manage", s.Name)
		}
	}
}

// TestCacheKeepsOnlyOwnManagedFields: the cached children carry only the
// operator's own managed-fields entries, which are all the reconcilers read.
func TestCacheKeepsOnlyOwnManagedFields(t *testing.T) {
	needEnv(t)
	h := startManager(t, harnessOpts{})
	ns := newNamespace(t, "fields")
	ctx := context.Background()
	c := loadCase(t, "minimal")
	createCase(t, c, ns)
	waitSTS(t, ns, c.Agent.Name)
	key := client.ObjectKey{Namespace: ns, Name: render.ServiceName(c.Agent)}
	svc := &corev1.Service{}
	if err := env.Client.Get(ctx, key, svc); err != nil {
		t.Fatal(err)
	}
	svc.Annotations = map[string]string{"example.com/note": "edited by hand"}
	if err := env.Client.Update(ctx, svc, client.FieldOwner("someone-else")); err != nil {
		t.Fatal(err)
	}
	cached := &corev1.Service{}
	poll.UntilNil(t, "the cache to see the edit", func() error {
		if err := h.cache.Get(ctx, key, cached); err != nil {
			return err
		}
		if cached.Annotations["example.com/note"] == "" {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	if len(cached.ManagedFields) == 0 {
		t.Fatal("the cached Service has no managed fields: the operator's own entry is needed")
	}
	for _, e := range cached.ManagedFields {
		if e.Manager != controllers.FieldOwner {
			t.Errorf("cached Service keeps the managed fields of %q", e.Manager)
		}
	}
}
