package main

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/adk2goose/goose-operator/controllers/references"
	activatorsrv "github.com/adk2goose/goose-operator/internal/activator"
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
