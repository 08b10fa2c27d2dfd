// Command goosectl is a small CLI for people who use GooseAgents.
//
// `goosectl list`, `get`, `park` and `wake` show and park agents.
// `goosectl ui NAME` serves the ADK web UI for a GooseAgent through a
// port-forward, so that `kubectl apply` → chat in a browser is two commands;
// `goosectl chat NAME` chats in the terminal over ADK's /run_live WebSocket.
// It is its own binary, not a subcommand of the adk2goose sidecar, so that
// every agent pod's sidecar image carries no kubeconfig handling,
// port-forwarding or web UI bundle.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

const usage = `goosectl: a CLI for GooseAgents (goose-operator)

usage:
  goosectl ui NAME [flags]   serve the ADK web UI for the GooseAgent NAME (goosectl ui -h lists the flags)
  goosectl chat NAME [flags] chat with the GooseAgent NAME in this terminal (goosectl chat -h lists the flags)
  goosectl list [-A]         the agents: Ready and why, parked and since when, last activity, sessions, tokens
  goosectl get NAME          one agent in full
  goosectl park NAME         park the agent by hand (spec.idle.parked): no pods, requests get 503
  goosectl wake NAME         wake a parked agent (clears spec.idle.parked, asks the operator to wake it)
  goosectl help              print this text
`

func main() {
	if err := dispatchWithSignals(); err != nil {
		fmt.Fprintln(os.Stderr, "goosectl:", err)
		os.Exit(1)
	}
}

// dispatchWithSignals runs the command until SIGTERM or Ctrl-C; it returns
// before main exits so that its deferred stop runs. The chat takes Ctrl-C
// itself: there it stops a turn, and Ctrl-D leaves.
func dispatchWithSignals() error {
	signals := []os.Signal{syscall.SIGTERM, os.Interrupt}
	if len(os.Args) > 1 && os.Args[1] == "chat" {
		signals = signals[:1]
	}
	ctx, stop := signal.NotifyContext(context.Background(), signals...)
	defer stop()
	return dispatch(ctx, os.Args[1:], defaultUIEnv())
}

// dispatch runs the command args name.
func dispatch(ctx context.Context, args []string, env uiEnv) error {
	if len(args) == 0 {
		fmt.Fprint(env.stderr, usage)
		return errors.New("a command is required")
	}
	switch args[0] {
	case "ui":
		return runUI(ctx, args[1:], env)
	case "chat":
		return runChat(ctx, args[1:], env)
	case "list", "get", "park", "wake":
		return runAgentCmd(ctx, args[0], args[1:], env)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(env.stdout, usage)
		return nil
	default:
		fmt.Fprint(env.stderr, usage)
		return fmt.Errorf("unknown command %q", args[0])
	}
}
