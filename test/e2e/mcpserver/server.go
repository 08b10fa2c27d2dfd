// Package mcpserver is the e2e suite's stdio MCP server: the server a
// GooseAgent's stdio extension starts from a spec.runtimes image
// (test/e2e/cmd/mcp-server, in hack/e2e/images' runtime image). Its tools
// report where and how goose started it, so a test can see that the command
// came from the runtime's mount and got the extension's environment.
package mcpserver

import (
	"context"
	"fmt"
	"os"
	"sort"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Name and Version are the server's MCP implementation info.
const (
	Name    = "goose-operator-e2e"
	Version = "1.0.0"
)

// Tool names.
const (
	ToolEcho        = "echo"
	ToolProcessInfo = "process_info"
)

// EchoInput is the echo tool's input.
type EchoInput struct {
	Text string `json:"text" jsonschema:"the text to send back"`
}

// EchoOutput is the echo tool's output.
type EchoOutput struct {
	Text string `json:"text"`
}

// ProcessInfoInput is the process_info tool's input.
type ProcessInfoInput struct {
	Env []string `json:"env,omitempty" jsonschema:"names of environment variables to report"`
}

// ProcessInfo is the process_info tool's output: the command the server was
// started as (argv[0], the path goose resolved), its executable, working
// directory and the requested environment variables (only those set).
type ProcessInfo struct {
	Command    string            `json:"command"`
	Executable string            `json:"executable"`
	WorkingDir string            `json:"workingDir"`
	Env        map[string]string `json:"env"`
}

// New returns the server with its tools.
func New() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: Name, Version: Version}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: ToolEcho, Description: "Sends the text back."},
		func(_ context.Context, _ *mcp.CallToolRequest, in EchoInput) (*mcp.CallToolResult, EchoOutput, error) {
			return nil, EchoOutput(in), nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: ToolProcessInfo, Description: "Reports this server's executable, working directory and chosen environment variables."},
		func(_ context.Context, _ *mcp.CallToolRequest, in ProcessInfoInput) (*mcp.CallToolResult, ProcessInfo, error) {
			info, err := processInfo(in.Env)
			return nil, info, err
		})
	return s
}

// ToolNames are the names New's tools are listed under, sorted.
func ToolNames() []string {
	names := []string{ToolEcho, ToolProcessInfo}
	sort.Strings(names)
	return names
}

func processInfo(env []string) (ProcessInfo, error) {
	exe, err := os.Executable()
	if err != nil {
		return ProcessInfo{}, fmt.Errorf("failed to find the executable: %w", err)
	}
	wd, err := os.Getwd()
	if err != nil {
		return ProcessInfo{}, fmt.Errorf("failed to get the working directory: %w", err)
	}
	info := ProcessInfo{Command: os.Args[0], Executable: exe, WorkingDir: wd, Env: map[string]string{}}
	for _, k := range env {
		if v, ok := os.LookupEnv(k); ok {
			info.Env[k] = v
		}
	}
	return info, nil
}
