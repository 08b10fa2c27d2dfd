package options

import (
	"io"
	"testing"
	"time"

	"github.com/dustin/go-humanize"
)

func envMap(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestParse(t *testing.T) {
	env := envMap(map[string]string{"ADK2GOOSE_ACTIVE_WINDOW": "1m", "ADK2GOOSE_APP_NAME": "from_env", "ADK2GOOSE_INSECURE_NO_AUTH": "true"})
	o, err := Parse([]string{"-app-name", "from_flag"}, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.AppName != "from_flag" || o.ActiveWindow != time.Minute || !o.InsecureNoAuth || o.GooseFlavor != "serve" ||
		o.ConfirmationTimeout != 10*time.Minute || o.GooseUnusedIdleTimeout != 2*time.Minute || o.DebugTraces != 10000 || o.PeersHost != "" || o.PodIP != "" {
		t.Fatalf("%+v", o)
	}
	o, err = Parse(nil, envMap(map[string]string{
		"ADK2GOOSE_INSECURE_NO_AUTH": "1", "ADK2GOOSE_CONFIRMATION_TIMEOUT": "90s", "ADK2GOOSE_DEBUG_TRACES": "500",
	}), io.Discard)
	if err != nil || o.ConfirmationTimeout != 90*time.Second || o.DebugTraces != 500 ||
		o.WorkspaceScope != "session" || o.WorkspaceRetention != 0 || o.WorkspaceSeedDir != "" {
		t.Fatalf("%v %+v", err, o)
	}
	o, err = Parse([]string{"-insecure-no-auth"}, envMap(map[string]string{
		"ADK2GOOSE_PEERS_HOST": "a-headless.ns.svc", "POD_IP": "10.0.0.7",
	}), io.Discard)
	if err != nil || o.PeersHost != "a-headless.ns.svc" || o.PodIP != "10.0.0.7" {
		t.Fatalf("%v %+v", err, o)
	}
	o, err = Parse([]string{"-insecure-no-auth", "-peers-host", "b-headless.ns.svc", "-pod-ip", "10.0.0.8"}, envMap(map[string]string{
		"ADK2GOOSE_PEERS_HOST": "a-headless.ns.svc", "POD_IP": "10.0.0.7",
	}), io.Discard)
	if err != nil || o.PeersHost != "b-headless.ns.svc" || o.PodIP != "10.0.0.8" {
		t.Fatalf("%v %+v", err, o)
	}
	// Body limits: defaults, env, then flags over env; sizes in any unit.
	o, err = Parse([]string{"-insecure-no-auth"}, envMap(nil), io.Discard)
	if err != nil || o.MaxMessageBody != 5<<20 || o.MaxOtherBody != 1<<20 || o.BodyReadTimeout != 30*time.Second || o.TurnWait != time.Minute {
		t.Fatalf("default limits: %v %+v", err, o)
	}
	o, err = Parse([]string{"-insecure-no-auth", "-max-message-body", "2MiB"}, envMap(map[string]string{
		"ADK2GOOSE_MAX_MESSAGE_BODY": "9MiB", "ADK2GOOSE_MAX_OTHER_BODY": "64KiB", "ADK2GOOSE_BODY_READ_TIMEOUT": "5s",
	}), io.Discard)
	if err != nil || o.MaxMessageBody != 2<<20 || o.MaxOtherBody != 64<<10 || o.BodyReadTimeout != 5*time.Second {
		t.Fatalf("limits from env and flags: %v %+v", err, o)
	}
	o, err = Parse([]string{"-insecure-no-auth", "-budget-file", "/etc/adk2goose/budget/budget.json"}, envMap(map[string]string{
		"POD_NAME": "agent-1", "ADK2GOOSE_BUDGET_SYNC_INTERVAL": "2s",
	}), io.Discard)
	if err != nil || o.BudgetFile != "/etc/adk2goose/budget/budget.json" || o.PodName != "agent-1" || o.BudgetSyncInterval != 2*time.Second {
		t.Fatalf("%v %+v", err, o)
	}
	for name, c := range map[string]struct {
		args []string
		env  map[string]string
	}{
		"bad size flag":      {[]string{"-insecure-no-auth", "-max-message-body", "lots"}, nil},
		"zero size":          {[]string{"-insecure-no-auth", "-max-other-body", "0"}, nil},
		"bad size env":       {[]string{"-insecure-no-auth"}, map[string]string{"ADK2GOOSE_MAX_OTHER_BODY": "-1"}},
		"no read timeout":    {[]string{"-insecure-no-auth", "-body-read-timeout", "0s"}, nil},
		"no turn wait":       {[]string{"-insecure-no-auth", "-turn-wait", "0s"}, nil},
		"no auth":            {nil, nil},
		"bad flavor":         {[]string{"-insecure-no-auth", "-goose-flavor", "x"}, nil},
		"bad env dur":        {[]string{"-insecure-no-auth"}, map[string]string{"ADK2GOOSE_DRAIN_TIMEOUT": "soon"}},
		"bad flag":           {[]string{"-nope"}, nil},
		"extra arg":          {[]string{"-insecure-no-auth", "x"}, nil},
		"no timeout":         {[]string{"-insecure-no-auth", "-confirmation-timeout", "0s"}, nil},
		"bad scope":          {[]string{"-insecure-no-auth", "-workspace-scope", "tenant"}, nil},
		"negative retention": {[]string{"-insecure-no-auth"}, map[string]string{"ADK2GOOSE_WORKSPACE_RETENTION": "-1h"}},
		"no budget sync":     {[]string{"-insecure-no-auth", "-budget-sync-interval", "0s"}, nil},
		"no unused idle":     {[]string{"-insecure-no-auth"}, map[string]string{"ADK2GOOSE_GOOSE_UNUSED_IDLE_TIMEOUT": "0s"}},
		"no debug traces":    {[]string{"-insecure-no-auth", "-debug-traces", "0"}, nil},
		"bad debug traces":   {[]string{"-insecure-no-auth"}, map[string]string{"ADK2GOOSE_DEBUG_TRACES": "many"}},
	} {
		if _, err := Parse(c.args, envMap(c.env), io.Discard); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// A size flag's default is written in the largest unit that divides it,
// and reads back as the same size.
func TestSizeText(t *testing.T) {
	for n, want := range map[int64]string{5 << 20: "5MiB", 1 << 30: "1GiB", 1536 << 10: "1536KiB", 1536: "1536B", 3 << 30 / 2: "1536MiB"} {
		got := sizeText(n)
		back, err := humanize.ParseBytes(got)
		if got != want || err != nil || int64(back) != n {
			t.Errorf("sizeText(%d) = %q (reads back as %d, %v), want %q", n, got, back, err, want)
		}
	}
}
