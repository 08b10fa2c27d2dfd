// Command adk2goose is the sidecar that serves a goose server as an ADK agent
// over the ADK REST API and A2A. Every flag can also be set through the
// environment variable named in its usage; flags win over the environment.
//
// With -goose-mode approve or smart_approve, goose asks before running tools;
// adk2goose forwards each request to the ADK client as an
// adk_request_confirmation call (A2A: an input-required task) and denies it
// when no answer arrives within -confirmation-timeout. The default mode stays
// auto, goose's own default.
//
// `adk2goose ui NAME` is a convenience for people, not part of the sidecar: it
// serves the ADK web UI locally for a GooseAgent, through a port-forward
// (see ui.go).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var err error
	if args := os.Args[1:]; len(args) > 0 && args[0] == "ui" {
		err = runUI(ctx, args[1:], defaultUIEnv())
	} else {
		err = run(ctx, args, os.Getenv)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "adk2goose:", err)
		os.Exit(1)
	}
}
