// Command adk2goose is the sidecar that serves a goose server as an ADK agent
// over the ADK REST API and A2A. Every flag can also be set through the
// environment variable named in its usage; flags win over the environment.
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
	if err := run(ctx, os.Args[1:], os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "adk2goose:", err)
		os.Exit(1)
	}
}
