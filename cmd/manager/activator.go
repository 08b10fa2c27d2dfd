package main

import (
	"context"
	"fmt"
	"net"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/adk2goose/goose-operator/controllers"
	activatorsrv "github.com/adk2goose/goose-operator/controllers/activator"
	"github.com/adk2goose/goose-operator/controllers/references"
	"github.com/adk2goose/goose-operator/controllers/render"
)

// addActivator runs the activator in this replica when
// --activator-bind-address is given: every replica answers for parked
// agents, leader or not.
func addActivator(ctx context.Context, mgr manager.Manager, o *options, refs *references.Tracker) error {
	if o.activatorAddr == "0" {
		return nil
	}
	act, err := activatorsrv.New(activatorsrv.Config{
		Addr:        o.activatorAddr,
		Client:      mgr.GetClient(),
		Cache:       mgr.GetCache(),
		Tokens:      refs,
		REST:        mgr.GetConfig(),
		MaxHeld:     o.activatorMaxHeld,
		HoldTimeout: o.activatorHoldTimeout,
		CardVersion: version,
		Logger:      ctrl.Log.WithName("activator"),
	})
	if err != nil {
		return err
	}
	return act.SetupWithManager(ctx, mgr)
}

// activatorPort is the port of --activator-bind-address, 0 when it is off.
func activatorPort(addr string) (int32, error) {
	if addr == "0" || addr == "" {
		return 0, nil
	}
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, fmt.Errorf("--activator-bind-address: %w", err)
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("--activator-bind-address: %q is not a port", p)
	}
	return int32(n), nil
}

// activator says where parked agents' Services point: the manager's own
// ready pods, found by --activator-pod-selector in POD_NAMESPACE (the
// downward API sets it in the install and the chart). Nil when the activator
// is off or the namespace is unknown.
func activator(o *options, namespace string) (*controllers.Activator, error) {
	port, err := activatorPort(o.activatorAddr)
	if err != nil || port == 0 || namespace == "" {
		return nil, err
	}
	sel, err := labels.Parse(o.activatorSelector)
	if err != nil {
		return nil, fmt.Errorf("--activator-pod-selector: %w", err)
	}
	return &controllers.Activator{Namespace: namespace, Selector: sel, Port: port}, nil
}

// activatorPeer is the activator's pods for agents' NetworkPolicies; nil
// without an activator.
func activatorPeer(o *options, act *controllers.Activator) *render.ActivatorPeer {
	if act == nil {
		return nil
	}
	sel, err := metav1.ParseToLabelSelector(o.activatorSelector) // parsed once already by parse
	if err != nil {
		return nil
	}
	return &render.ActivatorPeer{Namespace: act.Namespace, Pods: *sel}
}
