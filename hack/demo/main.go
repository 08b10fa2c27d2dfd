package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() { os.Exit(runDemo()) }

// runDemo parses the flags and runs the demo. It returns the exit code, so
// that its deferred stop runs before main exits.
func runDemo() int {
	var cfg Config
	flag.StringVar(&cfg.Manager, "manager", "bin/manager", "manager binary")
	flag.StringVar(&cfg.Adk2goose, "adk2goose", "bin/adk2goose", "adk2goose binary")
	flag.StringVar(&cfg.Sample, "sample", "config/samples/agents_v1alpha1_gooseagent_openai.yaml", "GooseAgent manifest to apply")
	flag.StringVar(&cfg.WorkDir, "work-dir", "", "directory for logs and the sidecar's data (default: a new temporary one)")
	flag.DurationVar(&cfg.StatsInterval, "stats-interval", 2*time.Second, "how often the operator polls the sidecar's /stats")
	flag.Parse()
	if cfg.WorkDir == "" {
		dir, err := os.MkdirTemp("", "goose-operator-demo-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "demo:", err)
			return 1
		}
		cfg.WorkDir = dir
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := Run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "\ndemo failed:", err)
		fmt.Fprintln(os.Stderr, "logs are in", cfg.WorkDir)
		return 1
	}
	return 0
}
