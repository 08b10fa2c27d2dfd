// Command mcp-server is the e2e suite's stdio MCP server (test/e2e/mcpserver):
// MCP over stdin/stdout until stdin closes or SIGTERM. hack/e2e/images puts it
// in the runtime image as usr/local/bin/e2e-mcp-server.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/adk2goose/goose-operator/test/e2e/mcpserver"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e-mcp-server:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := mcpserver.New().Run(ctx, &mcp.StdioTransport{}); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}
