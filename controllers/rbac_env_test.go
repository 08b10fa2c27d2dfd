package controllers_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/yaml"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers/render"
	"github.com/adk2goose/goose-operator/internal/testing/poll"
	"github.com/adk2goose/goose-operator/internal/testing/testenv"
)

// managerAsGeneratedRole returns a client configuration for a user holding
// only the ClusterRole that `make manifests` generates from the RBAC markers
// (config/rbac/role.yaml, which the chart and dist/install.yaml copy). The
// envtest admin may do anything, so a verb missing from the markers shows
// only when the manager runs as this user.
func managerAsGeneratedRole(t *testing.T) *rest.Config {
	t.Helper()
	e := needEnv(t)
	ctx := context.Background()
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(data, role); err != nil {
		t.Fatalf("failed to decode config/rbac/role.yaml: %v", err)
	}
	user := "generated-role-manager"
	role.Name = user
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	for _, o := range []client.Object{role, binding} {
		if err := e.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	// The authorizer learns of the binding from its informers, after the
	// create returned.
	e.WaitForAccess(t, user, "", testenv.Access{Group: agentsv1alpha1.GroupVersion.Group, Resource: "gooseagents", Verb: "watch", Allowed: true})
	cfg, err := e.AddUser(user)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestManagerRunsWithTheGeneratedRole: the manager holding only the role
// generated from its RBAC markers takes an agent in mode kubernetes through
// its life: children, the review binding and its finalizer, status, leaving
// the mode, parking, deletion. The admin that other envtest tests run as hid that the
// finalizer needs patch on gooseagents (on a real cluster such an agent
// never got a status) and that parking needs get and delete on endpoints.
func TestManagerRunsWithTheGeneratedRole(t *testing.T) {
	needEnv(t)
	cfg := managerAsGeneratedRole(t)
	ns := newNamespace(t, "generated-role")
	startManager(t, harnessOpts{config: cfg})
	ctx := context.Background()
	c := loadCase(t, "auth-kubernetes")
	createCase(t, c, ns)
	name := c.Agent.Name
	crbKey := client.ObjectKey{Name: render.ReviewBindingName(c.Agent)}

	poll.UntilNil(t, "status, finalizer and review binding", func() error {
		a := getAgent(t, ns, name)
		if !controllerutil.ContainsFinalizer(a, "agents.adk2goose.dev/review-binding") {
			return fmt.Errorf("no review finalizer: %v", a.Finalizers)
		}
		if a.Status.ObservedGeneration != a.Generation || meta.FindStatusCondition(a.Status.Conditions, agentsv1alpha1.ConditionReady) == nil {
			return fmt.Errorf("no status for generation %d: %+v", a.Generation, a.Status)
		}
		return env.Client.Get(ctx, crbKey, &rbacv1.ClusterRoleBinding{})
	})
	waitSTS(t, ns, render.StatefulSetName(c.Agent))

	updateAgent(t, ns, name, func(a *agentsv1alpha1.GooseAgent) {
		a.Spec.Sidecar.Auth = agentsv1alpha1.SidecarAuth{Mode: agentsv1alpha1.AuthModeToken}
	})
	poll.UntilNil(t, "review binding and finalizer removed in mode token", func() error {
		if err := env.Client.Get(ctx, crbKey, &rbacv1.ClusterRoleBinding{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("review binding still there (err %v)", err)
		}
		if a := getAgent(t, ns, name); controllerutil.ContainsFinalizer(a, "agents.adk2goose.dev/review-binding") {
			return fmt.Errorf("finalizer still there: %v", a.Finalizers)
		}
		return nil
	})

	updateAgent(t, ns, name, func(a *agentsv1alpha1.GooseAgent) {
		a.Spec.Sidecar.Auth = agentsv1alpha1.SidecarAuth{Mode: agentsv1alpha1.AuthModeKubernetes}
	})
	poll.UntilNil(t, "review binding again", func() error { return env.Client.Get(ctx, crbKey, &rbacv1.ClusterRoleBinding{}) })

	// Parking deletes what the endpoints controllers left for the Service
	// (the generated role must allow reading and deleting both).
	svc := &corev1.Service{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: render.ServiceName(c.Agent)}, svc); err != nil {
		t.Fatal(err)
	}
	stale := []client.Object{controllerEndpoints(svc), serviceSlice(svc, svc.Name+"-x7k2p", "endpointslice-controller.k8s.io")}
	for _, o := range stale {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	updateAgent(t, ns, name, func(a *agentsv1alpha1.GooseAgent) { a.Spec.Idle = &agentsv1alpha1.IdleSpec{Parked: true} })
	poll.UntilNil(t, "parked, the stale Endpoints deleted", func() error {
		if err := conditionIs(ns, name, agentsv1alpha1.ConditionParked, metav1.ConditionTrue, agentsv1alpha1.ReasonParkRequested); err != nil {
			return err
		}
		for _, o := range stale {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
				return fmt.Errorf("the %T the endpoints controllers wrote is still there (err %v)", o, err)
			}
		}
		return nil
	})
	if err := env.Client.Delete(ctx, getAgent(t, ns, name)); err != nil {
		t.Fatal(err)
	}
	poll.UntilNil(t, "agent and review binding deleted", func() error {
		if err := env.Client.Get(ctx, crbKey, &rbacv1.ClusterRoleBinding{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("review binding still there (err %v)", err)
		}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &agentsv1alpha1.GooseAgent{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("agent still there (err %v)", err)
		}
		return nil
	})
}
