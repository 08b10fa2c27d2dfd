package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/adk2goose/goose-operator/internal/testing/testenv"
)

// TestDemo runs the same steps as `make demo`, with binaries built from this
// tree, and checks what it shows.
func TestDemo(t *testing.T) {
	testenv.RequireAssets(t)
	bin := t.TempDir()
	root := testenv.RepoRoot()
	for _, b := range []string{"manager", "adk2goose"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(bin, b), "./cmd/"+b)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", b, err, out)
		}
	}
	t.Setenv("GOOSE_PROVIDER", "") // always the fake goose: no LLM here
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	work := t.TempDir()
	err := Run(ctx, Config{
		Manager: filepath.Join(bin, "manager"), Adk2goose: filepath.Join(bin, "adk2goose"),
		Sample:  filepath.Join(root, "config", "samples", "agents_v1alpha1_gooseagent_openai.yaml"),
		WorkDir: work, StatsInterval: time.Second,
	}, &out)
	if err != nil {
		for _, log := range []string{"manager.log", "adk2goose.log"} {
			b, _ := os.ReadFile(filepath.Join(work, log))
			t.Logf("--- %s\n%s", log, b)
		}
		t.Fatalf("demo failed: %v\n%s", err, out.String())
	}
	got := out.String()
	t.Log(got)
	for _, want := range []string{
		"statefulset.apps/openai-coder",
		"service/openai-coder-headless",
		"the fake goose serve",
		`goose> Hello from goose! You asked: "What can you do for me?". I am running behind the adk2goose sidecar.`,
		`goose> Hello from goose! You asked: "Summarise yourself in one line."`,
		"final event usageMetadata:",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	// The last table is kubectl get gooseagents -o wide with the figures.
	row := regexp.MustCompile(`(?m)^openai-coder\s+True\s+Available\s+gpt-4o\s+2\s+([1-9][0-9]*)\s+`)
	if !row.MatchString(got) {
		t.Errorf("kubectl get gooseagents does not show Ready, 2 sessions and tokens")
	}
}
