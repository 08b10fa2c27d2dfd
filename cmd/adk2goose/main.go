// Command adk2goose is the sidecar that serves a goose server as an ADK agent
// over the ADK REST API and A2A. Every flag can also be set through the
// environment variable named in its usage; flags win over the environment.
//
// goose's own GOOSE_MODE (the operator sets it from spec.mode) is the mode of
// new sessions; adk2goose does not set one. In approve and smart_approve
// goose asks before running tools; adk2goose forwards each request to the ADK
// client as an adk_request_confirmation call (A2A: an input-required task)
// and denies it when no answer arrives within -confirmation-timeout.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if err := runWithSignals(); err != nil {
		fmt.Fprintln(os.Stderr, "adk2goose:", err)
		os.Exit(1)
	}
}

// runWithSignals runs until SIGTERM or an interrupt; it returns before main
// exits so that its deferred stop runs.
func runWithSignals() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return run(ctx, os.Args[1:], os.Getenv)
}
