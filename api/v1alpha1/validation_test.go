package v1alpha1_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/internal/testing/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.RunShared(m)) }

func newNamespace(t *testing.T) string {
	t.Helper()
	env := testenv.Shared(t)
	ns := &unstructured.Unstructured{}
	ns.SetAPIVersion("v1")
	ns.SetKind("Namespace")
	ns.SetGenerateName("api-")
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatalf("failed to create namespace: %v", err)
	}
	return ns.GetName()
}

func validAgent(ns, name string) *agentsv1alpha1.GooseAgent {
	return &agentsv1alpha1.GooseAgent{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: agentsv1alpha1.GooseAgentSpec{
			Provider: agentsv1alpha1.ProviderSpec{Name: "ollama", Model: "qwen3:8b"},
		},
	}
}

func TestSamplesAreAccepted(t *testing.T) {
	ns := newNamespace(t)
	env := testenv.Shared(t)
	files, err := filepath.Glob(filepath.Join(testenv.RepoRoot(), "config", "samples", "agents_*.yaml"))
	if err != nil || len(files) < 5 {
		t.Fatalf("expected at least 5 samples, found %d (%v)", len(files), err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var ga agentsv1alpha1.GooseAgent
			if err := yaml.UnmarshalStrict(data, &ga); err != nil {
				t.Fatalf("sample does not match the Go types: %v", err)
			}
			ga.Namespace = ns
			if err := env.Client.Create(context.Background(), &ga); err != nil {
				t.Fatalf("sample rejected: %v", err)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	ns := newNamespace(t)
	env := testenv.Shared(t)
	ga := validAgent(ns, "defaults")
	ctx := context.Background()
	if err := env.Client.Create(ctx, ga); err != nil {
		t.Fatal(err)
	}
	var got agentsv1alpha1.GooseAgent
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(ga), &got); err != nil {
		t.Fatal(err)
	}
	s := got.Spec
	checks := []struct {
		field     string
		got, want any
	}{
		{"spec.server.flavor", s.Server.Flavor, agentsv1alpha1.ServerFlavorServe},
		{"spec.mode", s.Mode, agentsv1alpha1.ModeAuto},
		{"spec.storage.size", s.Storage.Size.String(), "1Gi"},
		{"spec.sidecar.port", s.Sidecar.Port, int32(8080)},
		{"spec.sidecar.auth.mode (existing clients keep working)", s.Sidecar.Auth.Mode, agentsv1alpha1.AuthModeToken},
		{"spec.workspace.mountPath", s.Workspace.MountPath, "/workspace"},
		{"spec.workspace.scope (a shared agent keeps sessions apart)", s.Workspace.Scope, agentsv1alpha1.WorkspaceScopeSession},
		{"spec.workspace.retention", s.Workspace.Retention != nil && s.Workspace.Retention.Duration == agentsv1alpha1.DefaultWorkspaceRetention, true},
		{"spec.replicas (left unset for an HPA)", s.Replicas == nil, true},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s defaulted to %v, want %v", c.field, c.got, c.want)
		}
	}
}

// TestWorkspaceSettingsAccepted: the edges of spec.workspace that must pass.
func TestWorkspaceSettingsAccepted(t *testing.T) {
	ns := newNamespace(t)
	env := testenv.Shared(t)
	for i, w := range []agentsv1alpha1.WorkspaceSpec{
		{Scope: agentsv1alpha1.WorkspaceScopeAgent, Retention: &metav1.Duration{}}, // 0s: keep
		{Scope: agentsv1alpha1.WorkspaceScopeUser, Retention: &metav1.Duration{Duration: time.Hour}},
		{Scope: agentsv1alpha1.WorkspaceScopeSession, Seed: &agentsv1alpha1.WorkspaceSeed{ConfigMapName: "starter.files"}},
		{Seed: &agentsv1alpha1.WorkspaceSeed{ConfigMapName: "starter"}}, // scope defaults to session
	} {
		ga := validAgent(ns, fmt.Sprintf("ws-%d", i))
		ga.Spec.Workspace = w
		if err := env.Client.Create(context.Background(), ga); err != nil {
			t.Errorf("workspace %+v rejected: %v", w, err)
		}
	}
}

// TestIdleSettingsAccepted: the edges of spec.idle that must pass.
func TestIdleSettingsAccepted(t *testing.T) {
	ns := newNamespace(t)
	env := testenv.Shared(t)
	for i, idle := range []agentsv1alpha1.IdleSpec{
		{}, // never parked
		{After: &metav1.Duration{Duration: 10 * time.Second}},
		{After: &metav1.Duration{Duration: 8760 * time.Hour}},
		{Parked: true},
	} {
		ga := validAgent(ns, fmt.Sprintf("idle-%d", i))
		ga.Spec.Idle = &idle
		if err := env.Client.Create(context.Background(), ga); err != nil {
			t.Errorf("idle %+v rejected: %v", idle, err)
		}
	}
}

func TestInvalidAgentsAreRejected(t *testing.T) {
	ns := newNamespace(t)
	env := testenv.Shared(t)
	cases := []struct {
		name   string
		mutate func(*agentsv1alpha1.GooseAgent)
		// want are substrings the API server's message must contain: the field
		// path and what is wrong with it.
		want []string
	}{
		{"missing model", func(g *agentsv1alpha1.GooseAgent) { g.Spec.Provider.Model = "" },
			[]string{"spec.provider.model"}},
		{"bad provider name", func(g *agentsv1alpha1.GooseAgent) { g.Spec.Provider.Name = "Open AI" },
			[]string{"spec.provider.name"}},
		{"provider needs a key", func(g *agentsv1alpha1.GooseAgent) { g.Spec.Provider.Name = "openai" },
			[]string{"spec.provider.apiKeySecretRef", "required for provider openai"}},
		{"azure needs an endpoint", func(g *agentsv1alpha1.GooseAgent) {
			g.Spec.Provider = agentsv1alpha1.ProviderSpec{Name: "azure_openai", Model: "gpt-4o",
				APIKeySecretRef: &agentsv1alpha1.SecretKeyRef{Name: "az", Key: "k"}}
		}, []string{"spec.provider.baseURL", "azure_openai"}},
		{"baseURL not a URL", func(g *agentsv1alpha1.GooseAgent) { g.Spec.Provider.BaseURL = "ftp://x" },
			[]string{"spec.provider.baseURL", "http or https"}},
		{"grace period too short for a drain", func(g *agentsv1alpha1.GooseAgent) {
			g.Spec.PodTemplate.TerminationGracePeriodSeconds = ptr.To[int64](10)
		}, []string{"spec.podTemplate.terminationGracePeriodSeconds", "greater than or equal to 30"}},
		{"unknown mode", func(g *agentsv1alpha1.GooseAgent) { g.Spec.Mode = "yolo" },
			[]string{"spec.mode", "Unsupported value"}},
		{"unknown server flavor", func(g *agentsv1alpha1.GooseAgent) { g.Spec.Server.Flavor = "acp" },
			[]string{"spec.server.flavor", "Unsupported value"}},
		{"goosed without image", func(g *agentsv1alpha1.GooseAgent) { g.Spec.Server.Flavor = "goosed" },
			[]string{"spec.server.image", "required when spec.server.flavor is goosed"}},
		{"instructions both inline and from", func(g *agentsv1alpha1.GooseAgent) {
			g.Spec.Instructions = "be nice"
			g.Spec.InstructionsFrom = &agentsv1alpha1.ValueSource{
				ConfigMapKeyRef: &agentsv1alpha1.ConfigMapKeyRef{Name: "p", Key: "k"}}
		}, []string{"spec.instructionsFrom", "mutually exclusive"}},
		{"instructionsFrom with two sources", func(g *agentsv1alpha1.GooseAgent) {
			g.Spec.InstructionsFrom = &agentsv1alpha1.ValueSource{
				ConfigMapKeyRef: &agentsv1alpha1.ConfigMapKeyRef{Name: "p", Key: "k"},
				SecretKeyRef:    &agentsv1alpha1.SecretKeyRef{Name: "p", Key: "k"}}
		}, []string{"spec.instructionsFrom", "exactly one of configMapKeyRef and secretKeyRef"}},
		{"duplicate extension names", func(g *agentsv1alpha1.GooseAgent) {
			g.Spec.Extensions = []agentsv1alpha1.ExtensionSpec{
				{Name: "developer", Type: agentsv1alpha1.ExtensionBuiltin},
				{Name: "developer", Type: agentsv1alpha1.ExtensionPlatform}}
		}, []string{"spec.extensions[1]", "Duplicate value"}},
		{"runtime subPath escaping the image", func(g *agentsv1alpha1.GooseAgent) {
			g.Spec.Runtimes = []agentsv1alpha1.RuntimeSpec{{Name: "node", Image: "node:22", SubPath: "usr/../../etc", Commands: []string{"npx"}}}
		}, []string{"spec.runtimes[0].subPath", "relative path without .."}},
		{"runtime binPath absolute", func(g *agentsv1alpha1.GooseAgent) {
			g.Spec.Runtimes = []agentsv1alpha1.RuntimeSpec{{Name: "uv", Image: "uv:0.8", BinPath: "/bin", Commands: []string{"uvx"}}}
		}, []string{"spec.runtimes[0].binPath", "relative path without .."}},
		{"runtime without commands", func(g *agentsv1alpha1.GooseAgent) {
			g.Spec.Runtimes = []agentsv1alpha1.RuntimeSpec{{Name: "uv", Image: "uv:0.8"}}
		}, []string{"spec.runtimes[0].commands"}},
		{"duplicate runtime names", func(g *agentsv1alpha1.GooseAgent) {
			g.Spec.Runtimes = []agentsv1alpha1.RuntimeSpec{
				{Name: "node", Image: "node:22", Commands: []string{"npx"}},
				{Name: "node", Image: "node:24", Commands: []string{"npx"}}}
		}, []string{"spec.runtimes[1]", "Duplicate value"}},
		{"stdio without cmd", func(g *agentsv1alpha1.GooseAgent) {
			g.Spec.Extensions = []agentsv1alpha1.ExtensionSpec{{Name: "fs", Type: agentsv1alpha1.ExtensionStdio}}
		}, []string{"spec.extensions[0].cmd", "required when type is stdio"}},
		{"streamable_http without uri", func(g *agentsv1alpha1.GooseAgent) {
			g.Spec.Extensions = []agentsv1alpha1.ExtensionSpec{{Name: "web", Type: agentsv1alpha1.ExtensionStreamableHTTP}}
		}, []string{"spec.extensions[0].uri", "required when type is streamable_http"}},
		{"builtin with cmd", func(g *agentsv1alpha1.GooseAgent) {
			g.Spec.Extensions = []agentsv1alpha1.ExtensionSpec{{Name: "developer", Type: agentsv1alpha1.ExtensionBuiltin, Cmd: "npx"}}
		}, []string{"spec.extensions[0].cmd", "only allowed when type is stdio"}},
		{"extension uri not http", func(g *agentsv1alpha1.GooseAgent) {
			g.Spec.Extensions = []agentsv1alpha1.ExtensionSpec{{Name: "web", Type: agentsv1alpha1.ExtensionStreamableHTTP, URI: "file:///etc/passwd"}}
		}, []string{"spec.extensions[0].uri", "http or https"}},
		{"unknown extension type", func(g *agentsv1alpha1.GooseAgent) {
			g.Spec.Extensions = []agentsv1alpha1.ExtensionSpec{{Name: "x", Type: "sse"}}
		}, []string{"spec.extensions[0].type", "Unsupported value"}},
		{"extension timeout out of range", func(g *agentsv1alpha1.GooseAgent) {
			g.Spec.Extensions = []agentsv1alpha1.ExtensionSpec{{Name: "developer", Type: agentsv1alpha1.ExtensionBuiltin, TimeoutSeconds: ptr.To[int32](0)}}
		}, []string{"spec.extensions[0].timeoutSeconds"}},
		{"negative replicas", func(g *agentsv1alpha1.GooseAgent) { g.Spec.Replicas = ptr.To[int32](-1) },
			[]string{"spec.replicas"}},
		{"too many replicas", func(g *agentsv1alpha1.GooseAgent) { g.Spec.Replicas = ptr.To[int32](1000) },
			[]string{"spec.replicas"}},
		{"storage too small", func(g *agentsv1alpha1.GooseAgent) { g.Spec.Storage.Size = new(resource.MustParse("1Mi")) },
			[]string{"spec.storage.size", "at least 64Mi"}},
		{"sidecar port privileged", func(g *agentsv1alpha1.GooseAgent) { g.Spec.Sidecar.Port = 80 },
			[]string{"spec.sidecar.port"}},
		{"CORS origin not an origin", func(g *agentsv1alpha1.GooseAgent) {
			g.Spec.Sidecar.CORSAllowedOrigins = []string{"localhost:8000"}
		}, []string{"spec.sidecar.corsAllowedOrigins[0]", "http(s) origin"}},
		{"workspace on /data", func(g *agentsv1alpha1.GooseAgent) { g.Spec.Workspace.MountPath = "/data" },
			[]string{"spec.workspace.mountPath"}},
		{"workspace relative path", func(g *agentsv1alpha1.GooseAgent) { g.Spec.Workspace.MountPath = "work" },
			[]string{"spec.workspace.mountPath"}},
		{"unknown workspace scope", func(g *agentsv1alpha1.GooseAgent) { g.Spec.Workspace.Scope = "tenant" },
			[]string{"spec.workspace.scope", "Unsupported value"}},
		{"idle after too short", func(g *agentsv1alpha1.GooseAgent) {
			g.Spec.Idle = &agentsv1alpha1.IdleSpec{After: &metav1.Duration{Duration: 9 * time.Second}}
		}, []string{"spec.idle.after", "between 10s and 8760h"}},
		{"idle after too long", func(g *agentsv1alpha1.GooseAgent) {
			g.Spec.Idle = &agentsv1alpha1.IdleSpec{After: &metav1.Duration{Duration: 8761 * time.Hour}}
		}, []string{"spec.idle.after", "between 10s and 8760h"}},
		{"workspace retention too short", func(g *agentsv1alpha1.GooseAgent) {
			g.Spec.Workspace.Retention = &metav1.Duration{Duration: time.Minute}
		}, []string{"spec.workspace.retention", "0s (keep) or at least 1h"}},
		{"workspace seed with agent scope", func(g *agentsv1alpha1.GooseAgent) {
			g.Spec.Workspace.Scope = agentsv1alpha1.WorkspaceScopeAgent
			g.Spec.Workspace.Seed = &agentsv1alpha1.WorkspaceSeed{ConfigMapName: "starter"}
		}, []string{"spec.workspace.seed", "needs scope user or session"}},
		{"workspace seed bad name", func(g *agentsv1alpha1.GooseAgent) {
			g.Spec.Workspace.Seed = &agentsv1alpha1.WorkspaceSeed{ConfigMapName: "../etc"}
		}, []string{"spec.workspace.seed.configMapName"}},
		{"secret ref without key", func(g *agentsv1alpha1.GooseAgent) {
			g.Spec.Provider.APIKeySecretRef = &agentsv1alpha1.SecretKeyRef{Name: "openai"}
		}, []string{"spec.provider.apiKeySecretRef.key"}},
		{"env var bad name", func(g *agentsv1alpha1.GooseAgent) {
			g.Spec.Provider.Env = []agentsv1alpha1.SecretEnvVar{{Name: "1BAD", SecretKeyRef: agentsv1alpha1.SecretKeyRef{Name: "s", Key: "k"}}}
		}, []string{"spec.provider.env[0].name"}},
		{"budget with an unknown period", func(g *agentsv1alpha1.GooseAgent) {
			g.Spec.Budget = &agentsv1alpha1.BudgetSpec{Period: "Year", TotalTokens: 1000}
		}, []string{"spec.budget.period", "Unsupported value"}},
		{"budget of no tokens", func(g *agentsv1alpha1.GooseAgent) {
			g.Spec.Budget = &agentsv1alpha1.BudgetSpec{Period: agentsv1alpha1.BudgetPeriodDay}
		}, []string{"spec.budget.totalTokens"}},
		{"budget input limit over the total", func(g *agentsv1alpha1.GooseAgent) {
			g.Spec.Budget = &agentsv1alpha1.BudgetSpec{Period: agentsv1alpha1.BudgetPeriodDay, TotalTokens: 10, InputTokens: ptr.To[int64](11)}
		}, []string{"spec.budget.inputTokens", "must not exceed spec.budget.totalTokens"}},
		{"budget output limit of zero", func(g *agentsv1alpha1.GooseAgent) {
			g.Spec.Budget = &agentsv1alpha1.BudgetSpec{Period: agentsv1alpha1.BudgetPeriodWeek, TotalTokens: 10, OutputTokens: ptr.To[int64](0)}
		}, []string{"spec.budget.outputTokens"}},
		{"telemetry endpoint not a URL", func(g *agentsv1alpha1.GooseAgent) {
			g.Spec.Telemetry = &agentsv1alpha1.TelemetrySpec{Endpoint: "otel-collector:4318"}
		}, []string{"spec.telemetry.endpoint", "http or https URL"}},
		{"telemetry sampling over 100", func(g *agentsv1alpha1.GooseAgent) {
			g.Spec.Telemetry = &agentsv1alpha1.TelemetrySpec{Endpoint: "http://otel:4318", SamplingPercent: ptr.To[int32](101)}
		}, []string{"spec.telemetry.samplingPercent"}},
		{"name too long", func(g *agentsv1alpha1.GooseAgent) { g.Name = strings.Repeat("a", 48) },
			[]string{"metadata.name", "at most 47 characters"}},
		{"name starting with a digit", func(g *agentsv1alpha1.GooseAgent) { g.Name = "1agent" },
			[]string{"metadata.name", "starting with a letter"}},
		{"unknown auth mode", func(g *agentsv1alpha1.GooseAgent) { g.Spec.Sidecar.Auth.Mode = "mtls" },
			[]string{"spec.sidecar.auth.mode", "Unsupported value"}},
		{"oidc mode without its settings", func(g *agentsv1alpha1.GooseAgent) { g.Spec.Sidecar.Auth.Mode = agentsv1alpha1.AuthModeOIDC },
			[]string{"spec.sidecar.auth.oidc", "required with mode oidc"}},
		{"oidc settings in kubernetes mode", func(g *agentsv1alpha1.GooseAgent) {
			g.Spec.Sidecar.Auth.Mode = agentsv1alpha1.AuthModeKubernetes
			g.Spec.Sidecar.Auth.OIDC = &agentsv1alpha1.OIDCAuth{IssuerURL: "https://dex.example.com", Audience: "a"}
		}, []string{"spec.sidecar.auth.oidc", "only with it"}},
		{"kubernetes settings in token mode", func(g *agentsv1alpha1.GooseAgent) {
			g.Spec.Sidecar.Auth.Kubernetes = &agentsv1alpha1.KubernetesAuth{Audience: "a"}
		}, []string{"spec.sidecar.auth.kubernetes", "only with mode kubernetes"}},
		{"admin groups in token mode", func(g *agentsv1alpha1.GooseAgent) { g.Spec.Sidecar.Auth.AdminGroups = []string{"ops"} },
			[]string{"spec.sidecar.auth.adminGroups", "needs mode kubernetes or oidc"}},
		{"oidc issuer over http", func(g *agentsv1alpha1.GooseAgent) {
			g.Spec.Sidecar.Auth.Mode = agentsv1alpha1.AuthModeOIDC
			g.Spec.Sidecar.Auth.OIDC = &agentsv1alpha1.OIDCAuth{IssuerURL: "http://dex.example.com", Audience: "a"}
		}, []string{"spec.sidecar.auth.oidc.issuerURL", "https URL"}},
		{"oidc without an audience", func(g *agentsv1alpha1.GooseAgent) {
			g.Spec.Sidecar.Auth.Mode = agentsv1alpha1.AuthModeOIDC
			g.Spec.Sidecar.Auth.OIDC = &agentsv1alpha1.OIDCAuth{IssuerURL: "https://dex.example.com"}
		}, []string{"spec.sidecar.auth.oidc.audience"}},
	}
	if len(cases) < 15 {
		t.Fatalf("the issue asks for at least 15 invalid agents, have %d", len(cases))
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ga := validAgent(ns, fmt.Sprintf("invalid-%d", i))
			tc.mutate(ga)
			err := env.Client.Create(context.Background(), ga)
			if err == nil {
				t.Fatal("the API server accepted an invalid GooseAgent")
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("expected an Invalid error, got %v", err)
			}
			t.Log(err) // what a user sees, for `go test -v`
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q does not contain %q", err.Error(), w)
				}
			}
		})
	}
}

func TestStorageIsImmutable(t *testing.T) {
	ns := newNamespace(t)
	env := testenv.Shared(t)
	ctx := context.Background()
	ga := validAgent(ns, "immutable")
	ga.Spec.Storage.StorageClassName = new("fast")
	if err := env.Client.Create(ctx, ga); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*agentsv1alpha1.GooseAgent){
		"storage class changed": func(g *agentsv1alpha1.GooseAgent) { g.Spec.Storage.StorageClassName = new("slow") },
		"storage class removed": func(g *agentsv1alpha1.GooseAgent) { g.Spec.Storage.StorageClassName = nil },
		"size changed":          func(g *agentsv1alpha1.GooseAgent) { g.Spec.Storage.Size = new(resource.MustParse("5Gi")) },
	} {
		t.Run(name, func(t *testing.T) {
			var cur agentsv1alpha1.GooseAgent
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(ga), &cur); err != nil {
				t.Fatal(err)
			}
			mutate(&cur)
			err := env.Client.Update(ctx, &cur)
			if err == nil || !strings.Contains(err.Error(), "spec.storage is immutable") {
				t.Fatalf("expected the immutable-storage error, got %v", err)
			}
		})
	}
	// Fields that can change do change.
	var cur agentsv1alpha1.GooseAgent
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(ga), &cur); err != nil {
		t.Fatal(err)
	}
	cur.Spec.Provider.Model = "llama3.3"
	if err := env.Client.Update(ctx, &cur); err != nil {
		t.Fatalf("changing the model was rejected: %v", err)
	}
}

// TestKubectlPrinterColumns drives the real kubectl against the envtest server.
func TestKubectlPrinterColumns(t *testing.T) {
	ns := newNamespace(t)
	env := testenv.Shared(t)
	ctx := context.Background()
	ga := validAgent(ns, "printed")
	ga.Spec.Budget = &agentsv1alpha1.BudgetSpec{Period: agentsv1alpha1.BudgetPeriodMonth, TotalTokens: 5000}
	if err := env.Client.Create(ctx, ga); err != nil {
		t.Fatal(err)
	}
	ga.Status = agentsv1alpha1.GooseAgentStatus{
		Conditions: []metav1.Condition{{Type: agentsv1alpha1.ConditionReady, Status: metav1.ConditionFalse,
			Reason: agentsv1alpha1.ReasonParked, Message: "parked: no turn on any replica for 10m0s", LastTransitionTime: metav1.Now()},
			{Type: agentsv1alpha1.ConditionParked, Status: metav1.ConditionTrue,
				Reason: agentsv1alpha1.ReasonIdle, Message: "no turn on any replica for 10m0s", LastTransitionTime: metav1.Now()}},
		Idle:      &agentsv1alpha1.IdleStatus{ParkedAt: new(metav1.Now())},
		Endpoints: agentsv1alpha1.Endpoints{REST: "http://printed." + ns + ".svc:8080"},
		Sessions:  agentsv1alpha1.SessionStats{Total: 7, Active: 2},
		Tokens:    agentsv1alpha1.TokenStats{Input: 1000, Output: 234, Total: 1234},
		Budget: &agentsv1alpha1.BudgetStatus{Period: agentsv1alpha1.BudgetPeriodMonth,
			PeriodStart: metav1.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), ResetsAt: metav1.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
			Used: agentsv1alpha1.TokenStats{Input: 300, Output: 100, Total: 400}},
	}
	if err := env.Client.Status().Update(ctx, ga); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(env.Kubectl(), append([]string{"--kubeconfig", env.Kubeconfig, "-n", ns}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	assertTable(t, run("get", "gooseagents"),
		[]string{"NAME", "READY", "REASON", "MODEL", "SESSIONS", "TOKENS", "PARKED", "AGE"},
		map[string]string{"NAME": "printed", "READY": "False", "REASON": "Parked", "MODEL": "qwen3:8b", "SESSIONS": "7", "TOKENS": "1234", "PARKED": "True"})
	assertTable(t, run("get", "ga", "-o", "wide"),
		[]string{"NAME", "READY", "REASON", "MODEL", "SESSIONS", "TOKENS", "PARKED", "AGE", "SERVER", "ACTIVE", "ENDPOINT", "USED", "BUDGET", "PERIOD", "PARKED-AT"},
		map[string]string{"SERVER": "serve", "ACTIVE": "2", "ENDPOINT": "http://printed." + ns + ".svc:8080",
			"USED": "400", "BUDGET": "5000", "PERIOD": "Month"})
	// The category lists it too.
	if out := run("get", "goose"); !strings.Contains(out, "printed") {
		t.Errorf("kubectl get goose (category) does not list the agent:\n%s", out)
	}
	// kubectl explain reads the field documentation from the CRD schema.
	if out := run("explain", "gooseagent.spec.mode"); !strings.Contains(out, "tool-approval policy") {
		t.Errorf("kubectl explain shows no documentation for spec.mode:\n%s", out)
	}
}

// assertTable checks a kubectl table's header and one row's cells by column.
func assertTable(t *testing.T, out string, header []string, cells map[string]string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("expected a header and one row, got:\n%s", out)
	}
	cols := strings.Fields(lines[0])
	if strings.Join(cols, " ") != strings.Join(header, " ") {
		t.Fatalf("columns %v, want %v", cols, header)
	}
	row := strings.Fields(lines[1])
	if len(row) != len(cols) {
		t.Fatalf("row %q has %d cells for %d columns", lines[1], len(row), len(cols))
	}
	for i, c := range cols {
		if want, ok := cells[c]; ok && row[i] != want {
			t.Errorf("column %s = %q, want %q", c, row[i], want)
		}
	}
}
