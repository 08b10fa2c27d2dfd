package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/yaml"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers"
	"github.com/adk2goose/goose-operator/controllers/internal/fixtures"
	"github.com/adk2goose/goose-operator/controllers/render"
	"github.com/adk2goose/goose-operator/internal/testing/poll"
	"github.com/adk2goose/goose-operator/internal/testing/testenv"
)

// The tests here iterate the operator's list of child kinds and hold no
// kind of their own: a kind added to the list (with its render.Desired
// field) is checked to be rendered, applied, watched, pruned and permitted
// without a line changed here.

// childGVKs returns the child kinds, as the scheme names them.
func childGVKs(t testing.TB, s *runtime.Scheme) []schema.GroupVersionKind {
	t.Helper()
	var out []schema.GroupVersionKind
	for _, o := range controllers.ChildObjects() {
		gvk, err := apiutil.GVKForObject(o, s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, gvk)
	}
	return out
}

// newList returns an empty list of kind gvk.
func newList(t testing.TB, s *runtime.Scheme, gvk schema.GroupVersionKind) client.ObjectList {
	t.Helper()
	o, err := s.New(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err != nil {
		t.Fatal(err)
	}
	return o.(client.ObjectList)
}

// gvkOf reads the kind of a rendered apply configuration.
func gvkOf(t testing.TB, ac runtime.ApplyConfiguration) (schema.GroupVersionKind, string) {
	t.Helper()
	u := toUnstructured(t, ac)
	return u.GroupVersionKind(), u.GetName()
}

func toUnstructured(t testing.TB, ac runtime.ApplyConfiguration) *unstructured.Unstructured {
	t.Helper()
	raw, err := json.Marshal(ac)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(raw); err != nil {
		t.Fatal(err)
	}
	return u
}

// renderCase renders c for the live agent a, with the golden inputs.
func renderCase(t testing.TB, c *fixtures.Case, a *agentsv1alpha1.GooseAgent) *render.Desired {
	t.Helper()
	values, missing, err := render.Resolve(render.References(a), c.Lookup)
	if err != nil || len(missing) > 0 {
		t.Fatalf("case %s: %v %v", c.Name, err, missing)
	}
	d, err := render.Build(c.Inputs(a, values))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestChildKindsRendered: the fixtures render every listed kind, so the
// envtest below exercises each, and render nothing of an unlisted kind,
// which would be applied but neither watched nor pruned.
func TestChildKindsRendered(t *testing.T) {
	s := testenv.Scheme()
	listed := childGVKs(t, s)
	cases, err := fixtures.Load()
	if err != nil {
		t.Fatal(err)
	}
	rendered := map[schema.GroupVersionKind]bool{}
	for _, c := range cases {
		a := c.Agent.DeepCopy()
		a.UID = fixtures.UID
		for _, o := range renderCase(t, c, a).Objects() {
			gvk, name := gvkOf(t, o)
			if !slices.Contains(listed, gvk) {
				t.Errorf("case %s renders %s %s, a kind missing from childKinds", c.Name, gvk, name)
			}
			rendered[gvk] = true
		}
	}
	for _, gvk := range listed {
		if !rendered[gvk] {
			t.Errorf("no fixture renders child kind %s", gvk)
		}
	}
}

// TestChildKindsPermitted: the generated role (config/rbac/role.yaml, from
// the markers beside childKinds) lets a user bound to it do ChildVerbs on
// every child kind, as the apiserver's authorizer decides; every child kind
// is namespaced (owner references cannot reach a cluster-scoped child); and
// the role deletes nothing but children.
func TestChildKindsPermitted(t *testing.T) {
	e := needEnv(t)
	ctx := context.Background()
	raw, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(raw, role); err != nil {
		t.Fatal(err)
	}
	var want []testenv.Access
	resources := map[schema.GroupResource]bool{}
	for _, gvk := range childGVKs(t, e.Scheme) {
		m, err := e.Client.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatal(err)
		}
		if m.Scope.Name() != meta.RESTScopeNameNamespace {
			t.Errorf("child kind %s is not namespaced", gvk)
		}
		resources[m.Resource.GroupResource()] = true
		for _, v := range controllers.ChildVerbs {
			want = append(want, testenv.Access{Group: gvk.Group, Resource: m.Resource.Resource, Verb: v, Allowed: true})
		}
	}
	for _, r := range role.Rules {
		if !slices.Contains(r.Verbs, "delete") {
			continue
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				// The review binding of an agent in mode kubernetes is cluster
				// scoped, so no child: a finalizer deletes it (reviewbinding.go).
				if g == rbacv1.GroupName && res == "clusterrolebindings" {
					continue
				}
				// A parked agent's Service loses the Endpoints the endpoints
				// controller left (parkedservice.go); the operator makes none.
				if g == "" && res == "endpoints" {
					continue
				}
				if !resources[schema.GroupResource{Group: g, Resource: res}] {
					t.Errorf("the role deletes %s.%s, which is no child kind", res, g)
				}
			}
		}
	}

	name := newNamespace(t, "rbac") // a unique name for the role, its binding and user
	role.ObjectMeta = metav1.ObjectMeta{Name: name}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}},
	}
	for _, o := range []client.Object{role, binding} {
		if err := e.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Client.Delete(context.Background(), o) })
	}
	e.WaitForAccess(t, name, "default", want...)
}

// TestChildKindsAppliedWatchedPruned: for every child kind, a deleted child
// comes back (the kind is watched and applied) and a stale child of the
// agent, one the agent no longer renders, is deleted (the kind is pruned).
func TestChildKindsAppliedWatchedPruned(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, "kinds")
	// The parked case renders the activator's slice, which needs an activator.
	startManager(t, harnessOpts{generate: fixtures.GenerateFixed,
		activator: &controllers.Activator{Namespace: ns, Selector: labels.SelectorFromSet(labels.Set{"app": "no-activator-pods"}), Port: 8085}})
	ctx := context.Background()
	byKind := map[schema.GroupVersionKind]runtime.ApplyConfiguration{}
	var a *agentsv1alpha1.GooseAgent
	for _, name := range []string{"approve", "parked"} {
		c := loadCase(t, name)
		createCase(t, c, ns)
		waitSTS(t, ns, c.Agent.Name)
		a = getAgent(t, ns, c.Agent.Name)
		for _, o := range renderCase(t, c, a).Objects() {
			gvk, _ := gvkOf(t, o)
			if _, ok := byKind[gvk]; !ok {
				byKind[gvk] = o
			}
		}
	}
	for _, gvk := range childGVKs(t, env.Scheme) {
		t.Run(gvk.Kind, func(t *testing.T) {
			desired, ok := byKind[gvk]
			if !ok {
				t.Fatalf("no case renders %s: give a fixture that renders every child kind to this test", gvk.Kind)
			}
			want := toUnstructured(t, desired)
			key := client.ObjectKey{Namespace: ns, Name: want.GetName()}
			live := &unstructured.Unstructured{}
			live.SetGroupVersionKind(gvk)
			poll.UntilNil(t, gvk.Kind+" "+key.Name, func() error { return env.Client.Get(ctx, key, live) })
			oldUID := live.GetUID()
			if err := env.Client.Delete(ctx, live); err != nil {
				t.Fatal(err)
			}

			stale := want.DeepCopy()
			stale.SetName(want.GetName() + "-stale")
			if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(stale), client.FieldOwner("children-test")); err != nil {
				t.Fatal(err)
			}
			poll.UntilNil(t, gvk.Kind+" "+key.Name+" to come back", func() error {
				got := &unstructured.Unstructured{}
				got.SetGroupVersionKind(gvk)
				if err := env.Client.Get(ctx, key, got); err != nil {
					return err
				}
				if got.GetUID() == oldUID {
					return fmt.Errorf("still the deleted one")
				}
				return nil
			})
			poll.UntilNil(t, "stale "+gvk.Kind+" to be pruned", func() error {
				got := &unstructured.Unstructured{}
				got.SetGroupVersionKind(gvk)
				err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: stale.GetName()}, got)
				switch {
				case apierrors.IsNotFound(err):
					return nil
				case err != nil:
					return err
				case got.GetDeletionTimestamp() != nil:
					return nil // deleted; envtest has no garbage collector to finish it
				}
				return fmt.Errorf("still there, controlled by the agent: %v", metav1.IsControlledBy(got, a))
			})
		})
	}
}
