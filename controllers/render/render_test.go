package render_test

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers/internal/fixtures"
	"github.com/adk2goose/goose-operator/controllers/render"
	"github.com/adk2goose/goose-operator/sidecar/budget"
	"github.com/adk2goose/goose-operator/sidecar/identity"
)

// build renders a fixture case with the fixed golden inputs.
func build(t *testing.T, c *fixtures.Case) *render.Desired {
	t.Helper()
	a := c.Agent.DeepCopy()
	a.UID = fixtures.UID
	values, missing, err := render.Resolve(render.References(a), c.Lookup)
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) > 0 {
		t.Fatalf("case %s: %s", c.Name, render.MissingMessage(missing))
	}
	d, err := render.Build(c.Inputs(a, values))
	if err != nil {
		t.Fatalf("case %s: %v", c.Name, err)
	}
	return d
}

// TestGolden compares every input's rendered children with testdata/golden.
// Regenerate with UPDATE_GOLDEN=1 go test ./controllers/render/.
func TestGolden(t *testing.T) {
	cases, err := fixtures.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) == 0 {
		t.Fatal("no input cases")
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			got, err := render.ToYAML(build(t, c).Objects())
			if err != nil {
				t.Fatal(err)
			}
			path := fixtures.GoldenPath(c.Name)
			if os.Getenv("UPDATE_GOLDEN") != "" {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with UPDATE_GOLDEN=1 to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("rendered children differ from %s (-want +got):\n%s", path, cmp.Diff(string(want), string(got)))
			}
		})
	}
}

// TestBuildDeterministic guards the golden files against map-order noise.
func TestBuildDeterministic(t *testing.T) {
	cases, err := fixtures.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		first, _ := render.ToYAML(build(t, c).Objects())
		for range 5 {
			again, _ := render.ToYAML(build(t, c).Objects())
			if !bytes.Equal(first, again) {
				t.Fatalf("case %s renders differently on repeated builds", c.Name)
			}
		}
	}
}

func loadCase(t *testing.T, name string) *fixtures.Case {
	t.Helper()
	c, err := fixtures.LoadFile(filepath.Join(fixtures.Dir(), "inputs", name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestChangesRollThePods: every change goose or the sidecar reads only at
// start changes the pod template, directly (env, args) or through the config
// hash of what the template cannot show (config files, Secret values).
func TestChangesRollThePods(t *testing.T) {
	template := func(c *fixtures.Case) string {
		t.Helper()
		y, err := render.ToYAML([]runtime.ApplyConfiguration{build(t, c).StatefulSet})
		if err != nil {
			t.Fatal(err)
		}
		return string(y)
	}
	base := template(loadCase(t, "approve"))

	mutate := map[string]func(c *fixtures.Case){
		"model":    func(c *fixtures.Case) { c.Agent.Spec.Provider.Model = "gpt-4.1" },
		"provider": func(c *fixtures.Case) { c.Agent.Spec.Provider.Name = "litellm" },
		"mode":     func(c *fixtures.Case) { c.Agent.Spec.Mode = agentsv1alpha1.ModeAuto },
		"extension timeout": func(c *fixtures.Case) {
			v := int32(61)
			c.Agent.Spec.Extensions[1].TimeoutSeconds = &v
		},
		"extension added": func(c *fixtures.Case) {
			c.Agent.Spec.Extensions = append(c.Agent.Spec.Extensions, agentsv1alpha1.ExtensionSpec{Name: "todo", Type: agentsv1alpha1.ExtensionPlatform})
		},
		"api key secret value": func(c *fixtures.Case) { c.Secrets[0].StringData["api-key"] = "sk-rotated" },
		"header secret value":  func(c *fixtures.Case) { c.Secrets[1].StringData["authorization"] = "Bearer rotated" },
	}
	for name, m := range mutate {
		t.Run(name, func(t *testing.T) {
			c := loadCase(t, "approve")
			m(c)
			if template(c) == base {
				t.Errorf("the pod template did not change")
			}
		})
	}
	t.Run("unrelated secret key", func(t *testing.T) {
		c := loadCase(t, "approve")
		c.Secrets[0].StringData["unused"] = "x"
		if template(c) != base {
			t.Errorf("the pod template changed for a key the agent does not read")
		}
	})
	t.Run("pod template carries the hash", func(t *testing.T) {
		d := build(t, loadCase(t, "approve"))
		if got := d.StatefulSet.Spec.Template.Annotations[render.ConfigHashAnnotation]; got != d.ConfigHash || got == "" {
			t.Errorf("annotation %q, want %q", got, d.ConfigHash)
		}
	})
}

// TestOneRoutePerField: spec.provider.name, spec.provider.model and spec.mode
// reach goose as one env var each, which goose reads before any config file;
// neither config.yaml nor the sidecar carries them.
func TestOneRoutePerField(t *testing.T) {
	cases, err := fixtures.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		d := build(t, c)
		spec := &c.Agent.Spec
		mode := string(spec.Mode)
		if mode == "" {
			mode = string(agentsv1alpha1.ModeAuto)
		}
		want := map[string]string{"GOOSE_PROVIDER": spec.Provider.Name, "GOOSE_MODEL": spec.Provider.Model, "GOOSE_MODE": mode}

		goose := d.StatefulSet.Spec.Template.Spec.Containers[0]
		for _, e := range goose.Env {
			if w, ok := want[*e.Name]; ok {
				if e.Value == nil || *e.Value != w {
					t.Errorf("case %s: goose env %s = %v, want %q", c.Name, *e.Name, e.Value, w)
				}
				delete(want, *e.Name)
			}
		}
		if len(want) > 0 {
			t.Errorf("case %s: goose env lacks %v", c.Name, want)
		}

		all, err := render.ToYAML(d.Objects())
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"GOOSE_PROVIDER", "GOOSE_MODEL", "GOOSE_MODE"} {
			if n := len(regexp.MustCompile(`\b`+key+`\b`).FindAll(all, -1)); n != 1 {
				t.Errorf("case %s: %s appears %d times in the rendered children, want once (goose's env)", c.Name, key, n)
			}
		}
		if bytes.Contains(all, []byte("goose-mode")) {
			t.Errorf("case %s: the sidecar is given the mode", c.Name)
		}
	}
}

// TestNoSecretInConfigMap: no referenced Secret value may reach the ConfigMap
// or a literal env value.
func TestNoSecretInConfigMap(t *testing.T) {
	cases, err := fixtures.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		d := build(t, c)
		cm, _ := render.ToYAML([]runtime.ApplyConfiguration{d.ConfigMap})
		sts, _ := render.ToYAML([]runtime.ApplyConfiguration{d.StatefulSet})
		for _, s := range c.Secrets {
			for k, v := range s.StringData {
				if strings.Contains(string(cm), v) {
					t.Errorf("case %s: ConfigMap contains Secret %s key %s", c.Name, s.Name, k)
				}
				if strings.Contains(string(sts), v) {
					t.Errorf("case %s: StatefulSet contains Secret %s key %s", c.Name, s.Name, k)
				}
			}
		}
		for _, v := range []string{fixtures.Generated.GooseSecretKey, fixtures.Generated.AuthToken} {
			if strings.Contains(string(cm), v) || strings.Contains(string(sts), v) {
				t.Errorf("case %s: a generated secret leaked into the ConfigMap or StatefulSet", c.Name)
			}
		}
	}
}

func TestReplicasOnlyWhenSet(t *testing.T) {
	if r := build(t, loadCase(t, "minimal")).StatefulSet.Spec.Replicas; r != nil {
		t.Errorf("replicas = %d for an agent without spec.replicas; want the field absent", *r)
	}
	if r := build(t, loadCase(t, "goosed")).StatefulSet.Spec.Replicas; r == nil || *r != 2 {
		t.Errorf("replicas = %v, want 2", r)
	}
}

// TestParked: a parked agent renders no pods and a Service without a
// selector, and the activator's slice names the Service, its port and the
// activator's pods; awake, the selector and the replica count return.
func TestParked(t *testing.T) {
	for _, name := range []string{"minimal", "goosed"} {
		c := loadCase(t, name)
		a := c.Agent.DeepCopy()
		a.UID = fixtures.UID
		values, _, err := render.Resolve(render.References(a), c.Lookup)
		if err != nil {
			t.Fatal(err)
		}
		in := render.Inputs{Agent: a, Defaults: fixtures.Defaults, Generated: fixtures.Generated, Values: values, Parked: true,
			Activator: &render.Activator{Port: 8085, Pods: []render.ActivatorPod{
				{Namespace: "goose-system", Name: "manager-a", IP: "10.0.0.7"},
				{Namespace: "goose-system", Name: "manager-b", IP: "fd00::9"}, // another family: left out
			}}}
		d, err := render.Build(in)
		if err != nil {
			t.Fatal(err)
		}
		if r := d.StatefulSet.Spec.Replicas; r == nil || *r != 0 {
			t.Errorf("%s: parked replicas = %v, want 0", name, r)
		}
		if sel := d.Service.Spec.Selector; sel != nil {
			t.Errorf("%s: parked Service selector = %v, want none", name, sel)
		}
		if sel := d.HeadlessService.Spec.Selector; sel == nil {
			t.Errorf("%s: the headless Service lost its selector", name)
		}
		s := d.ActivatorSlice
		if s == nil {
			t.Fatalf("%s: no activator slice", name)
		}
		if *s.Name != a.Name+"-activator" || s.Labels["kubernetes.io/service-name"] != render.ServiceName(a) ||
			s.Labels["endpointslice.kubernetes.io/managed-by"] != render.SliceManagedBy || *s.AddressType != "IPv4" {
			t.Errorf("%s: slice %s labels %v type %v", name, *s.Name, s.Labels, *s.AddressType)
		}
		if len(s.Ports) != 1 || *s.Ports[0].Port != 8085 || *s.Ports[0].Name != render.PortName || *s.Ports[0].Name != *d.Service.Spec.Ports[0].Name {
			t.Errorf("%s: slice ports %+v, want the Service port's name on 8085", name, s.Ports)
		}
		if len(s.Endpoints) != 1 || s.Endpoints[0].Addresses[0] != "10.0.0.7" || *s.Endpoints[0].TargetRef.Name != "manager-a" || !*s.Endpoints[0].Conditions.Ready {
			t.Errorf("%s: slice endpoints %+v", name, s.Endpoints)
		}
		if objs := d.Objects(); objs[2] != runtime.ApplyConfiguration(s) {
			t.Errorf("%s: the slice is applied after the Service; it must come first", name)
		}

		in.Parked, in.Activator = false, nil
		if d, err = render.Build(in); err != nil {
			t.Fatal(err)
		}
		if d.ActivatorSlice != nil || !cmp.Equal(d.Service.Spec.Selector, render.SelectorLabels(a)) {
			t.Errorf("%s: awake slice %v selector %v", name, d.ActivatorSlice, d.Service.Spec.Selector)
		}
		if r := d.StatefulSet.Spec.Replicas; (a.Spec.Replicas == nil) != (r == nil) {
			t.Errorf("%s: awake replicas %v, spec %v", name, r, a.Spec.Replicas)
		}
	}
}

func TestSidecarIsNativeAndOnlyPort(t *testing.T) {
	d := build(t, loadCase(t, "openai"))
	pod := d.StatefulSet.Spec.Template.Spec
	var sidecar *string
	for _, c := range pod.InitContainers {
		if *c.Name == render.SidecarContainer {
			if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
				t.Errorf("sidecar restartPolicy = %v, want Always", c.RestartPolicy)
			}
			sidecar = c.Name
			if len(c.Ports) != 1 || *c.Ports[0].ContainerPort != 8080 {
				t.Errorf("sidecar ports = %v", c.Ports)
			}
		} else if len(c.Ports) > 0 {
			t.Errorf("init container %s exposes ports", *c.Name)
		}
	}
	if sidecar == nil {
		t.Fatal("no adk2goose init container")
	}
	for _, c := range pod.Containers {
		if len(c.Ports) > 0 {
			t.Errorf("container %s exposes ports; only the sidecar may", *c.Name)
		}
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("automountServiceAccountToken must be false")
	}
}

// TestNetworkPolicyAdmitsOwnPods: sidecars forward sessions to each other,
// so a restricted From must still admit the agent's pods, and an empty From
// must stay open to every source.
func TestNetworkPolicyAdmitsOwnPods(t *testing.T) {
	c := loadCase(t, "approve")
	rule := build(t, c).NetworkPolicy.Spec.Ingress[0]
	if n := len(rule.From); n != 2 {
		t.Fatalf("from has %d peers, want the spec's one and the agent's pods", n)
	}
	own := rule.From[1]
	if own.NamespaceSelector != nil || own.PodSelector == nil || !cmp.Equal(own.PodSelector.MatchLabels, render.SelectorLabels(c.Agent)) {
		t.Errorf("last peer = %+v, want the agent's pods in its namespace", own)
	}
	// With an activator, its pods are admitted too: it passes held requests
	// on to a woken pod.
	a := c.Agent.DeepCopy()
	a.UID = fixtures.UID
	values, _, err := render.Resolve(render.References(a), c.Lookup)
	if err != nil {
		t.Fatal(err)
	}
	in := c.Inputs(a, values)
	in.Defaults.ActivatorPeer = &render.ActivatorPeer{Namespace: "goose-system", Pods: metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "goose-operator"}}}
	d, err := render.Build(in)
	if err != nil {
		t.Fatal(err)
	}
	from := d.NetworkPolicy.Spec.Ingress[0].From
	if len(from) != 3 || from[2].NamespaceSelector == nil || from[2].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "goose-system" ||
		from[2].PodSelector == nil || from[2].PodSelector.MatchLabels["app.kubernetes.io/name"] != "goose-operator" {
		t.Errorf("from with an activator = %+v, want the activator's pods last", from)
	}

	c.Agent.Spec.NetworkPolicy.From = nil
	if from := build(t, c).NetworkPolicy.Spec.Ingress[0].From; len(from) != 0 {
		t.Errorf("from = %+v for an empty spec.networkPolicy.from; want any source", from)
	}
}

func TestInvalidSpec(t *testing.T) {
	for name, m := range map[string]func(a *agentsv1alpha1.GooseAgent){
		"reserved env": func(a *agentsv1alpha1.GooseAgent) {
			a.Spec.PodTemplate.Env = []corev1.EnvVar{{Name: "GOOSE_SERVER__SECRET_KEY", Value: "x"}}
		},
		"model in pod env": func(a *agentsv1alpha1.GooseAgent) {
			a.Spec.PodTemplate.Env = []corev1.EnvVar{{Name: "GOOSE_MODEL", Value: "gpt-4.1"}}
		},
		"mode in pod env": func(a *agentsv1alpha1.GooseAgent) {
			a.Spec.PodTemplate.Env = []corev1.EnvVar{{Name: "GOOSE_MODE", Value: "chat"}}
		},
		"model from a secret": func(a *agentsv1alpha1.GooseAgent) {
			a.Spec.Provider.Env = []agentsv1alpha1.SecretEnvVar{{Name: "GOOSE_MODEL", SecretKeyRef: agentsv1alpha1.SecretKeyRef{Name: "openai", Key: "api-key"}}}
		},
		"conflicting secret env": func(a *agentsv1alpha1.GooseAgent) {
			a.Spec.Provider.Env = []agentsv1alpha1.SecretEnvVar{{Name: "OPENAI_API_KEY", SecretKeyRef: agentsv1alpha1.SecretKeyRef{Name: "tickets-mcp", Key: "authorization"}}}
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := loadCase(t, "approve")
			m(c.Agent)
			values, _, _ := render.Resolve(render.References(c.Agent), c.Lookup)
			_, err := render.Build(render.Inputs{Agent: c.Agent, Defaults: fixtures.Defaults, Generated: fixtures.Generated, Values: values})
			if !render.IsInvalidSpec(err) {
				t.Fatalf("err = %v, want an InvalidSpecError", err)
			}
		})
	}
}

func TestBuildRejectsUnresolved(t *testing.T) {
	c := loadCase(t, "openai")
	_, err := render.Build(render.Inputs{Agent: c.Agent, Defaults: fixtures.Defaults, Generated: fixtures.Generated})
	if err == nil || render.IsInvalidSpec(err) {
		t.Fatalf("err = %v, want an unresolved-reference error", err)
	}
	if _, err := render.Build(render.Inputs{}); err == nil {
		t.Fatal("Build with no agent succeeded")
	}
}

func TestResolveMissing(t *testing.T) {
	c := loadCase(t, "full")
	c.Secrets = c.Secrets[1:] // drop "azure"
	_, missing, err := render.Resolve(render.References(c.Agent), c.Lookup)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`Secret "azure" not found`}
	if diff := cmp.Diff(want, missing); diff != "" {
		t.Errorf("missing (-want +got):\n%s", diff)
	}
	// The optional ConfigMap "extra" of podTemplate.env is absent without complaint.
	c = loadCase(t, "full")
	c.Secrets[0].StringData = map[string]string{"key": "k"}
	_, missing, _ = render.Resolve(render.References(c.Agent), c.Lookup)
	if diff := cmp.Diff([]string{`key "deployment" not found in Secret "azure"`}, missing); diff != "" {
		t.Errorf("missing (-want +got):\n%s", diff)
	}
}

// TestBudgetChangeRollsNoPod: the budget reaches the sidecar as a file in
// the ConfigMap, in the sidecar's own format; changing its values changes
// that file only, never the pod template.
func TestBudgetChangeRollsNoPod(t *testing.T) {
	base := build(t, loadCase(t, "budget"))
	file := base.ConfigMap.Data[render.KeyBudget]
	l, err := budget.ParseLimits([]byte(file))
	if err != nil {
		t.Fatalf("the sidecar cannot read the rendered budget %q: %v", file, err)
	}
	if l.Period != budget.Month || l.TotalTokens != 1000000 || l.InputTokens != nil || *l.OutputTokens != 200000 {
		t.Fatalf("rendered budget %+v", l)
	}
	sidecar := base.StatefulSet.Spec.Template.Spec.InitContainers[1]
	if !slices.Contains(sidecar.Args, "--budget-file="+render.BudgetDir+"/"+render.KeyBudget) {
		t.Fatalf("sidecar args %v", sidecar.Args)
	}
	for _, m := range sidecar.VolumeMounts {
		if *m.Name == "budget" && (m.SubPath != nil || *m.MountPath != render.BudgetDir) {
			t.Fatalf("budget mount %+v: a subPath mount never sees updates", m)
		}
	}

	c := loadCase(t, "budget")
	c.Agent.Spec.Budget.TotalTokens = 2000000
	c.Agent.Spec.Budget.Period = agentsv1alpha1.BudgetPeriodWeek
	raised := build(t, c)
	if raised.ConfigMap.Data[render.KeyBudget] == file {
		t.Fatal("the raised budget did not reach the ConfigMap")
	}
	before, _ := render.ToYAML([]runtime.ApplyConfiguration{base.StatefulSet})
	after, _ := render.ToYAML([]runtime.ApplyConfiguration{raised.StatefulSet})
	if !bytes.Equal(before, after) || raised.ConfigHash != base.ConfigHash {
		t.Fatalf("raising the budget changed the pod template:\n%s", cmp.Diff(string(before), string(after)))
	}

	// Without a budget there is no file, mount or flag.
	c.Agent.Spec.Budget = nil
	none := build(t, c)
	y, _ := render.ToYAML(none.Objects())
	if _, ok := none.ConfigMap.Data[render.KeyBudget]; ok || strings.Contains(string(y), "budget") {
		t.Fatal("an agent without a budget renders one")
	}
}

// TestTelemetryEnv: spec.telemetry reaches the sidecar and goose as the
// standard OTEL_* environment, header values only as Secret references, and
// a rotated header Secret rolls the pods (env is read at start).
func TestTelemetryEnv(t *testing.T) {
	c := loadCase(t, "budget")
	d := build(t, c)
	spec := d.StatefulSet.Spec.Template.Spec
	for _, ctr := range []corev1ac.ContainerApplyConfiguration{spec.InitContainers[1], spec.Containers[0]} {
		env := map[string]corev1ac.EnvVarApplyConfiguration{}
		for _, e := range ctr.Env {
			env[*e.Name] = e
		}
		if v := env["OTEL_EXPORTER_OTLP_ENDPOINT"].Value; v == nil || *v != "http://otel-collector.observability.svc:4318" {
			t.Errorf("%s: endpoint %v", *ctr.Name, v)
		}
		if v := env["OTEL_EXPORTER_OTLP_HEADERS"].Value; v == nil || *v != "x-api-key=$(ADK2GOOSE_OTLP_HEADER_0)" {
			t.Errorf("%s: headers %v", *ctr.Name, v)
		}
		if h := env["ADK2GOOSE_OTLP_HEADER_0"]; h.ValueFrom == nil || *h.ValueFrom.SecretKeyRef.Name != "otel" || h.Value != nil {
			t.Errorf("%s: the header must come from its Secret: %+v", *ctr.Name, h)
		}
		if v := env["OTEL_TRACES_SAMPLER_ARG"].Value; v == nil || *v != "0.25" {
			t.Errorf("%s: sampler arg %v", *ctr.Name, v)
		}
	}
	c.Secrets[1].StringData["api-key"] = "rotated"
	if build(t, c).ConfigHash == d.ConfigHash {
		t.Error("a rotated OTLP header Secret does not roll the pods")
	}
	c.Agent.Spec.Telemetry = nil
	if y, _ := render.ToYAML(build(t, c).Objects()); strings.Contains(string(y), "OTEL_") {
		t.Error("an agent without telemetry renders OTEL_ variables")
	}
}

// TestAuthFileIsWhatTheSidecarReads: the auth file rendered for each mode
// decodes as the sidecar's settings (unknown fields refused) and names the
// agent, and the oidc one builds a verifier.
func TestAuthFileIsWhatTheSidecarReads(t *testing.T) {
	for _, tc := range []struct{ name, mode string }{{"auth-kubernetes", identity.ModeKubernetes}, {"auth-oidc", identity.ModeOIDC}} {
		t.Run(tc.name, func(t *testing.T) {
			d := build(t, loadCase(t, tc.name))
			path := filepath.Join(t.TempDir(), render.KeyAuth)
			if err := os.WriteFile(path, []byte(d.ConfigMap.Data[render.KeyAuth]), 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := identity.ReadSettings(path)
			if err != nil {
				t.Fatal(err)
			}
			if s.Mode != tc.mode || len(s.AdminGroups) == 0 {
				t.Fatalf("settings %+v", s)
			}
			switch tc.mode {
			case identity.ModeKubernetes:
				if k := s.Kubernetes; k == nil || k.Namespace != "agents" || k.Agent != "helper" || k.Audience != "agents.adk2goose.dev/agents/helper" {
					t.Fatalf("kubernetes settings %+v", k)
				}
			case identity.ModeOIDC:
				if v, err := s.Verifier(t.Context()); err != nil || v == nil {
					t.Fatalf("oidc verifier: %v", err)
				}
			}
		})
	}
	d := build(t, loadCase(t, "minimal"))
	if _, ok := d.ConfigMap.Data[render.KeyAuth]; ok {
		t.Fatal("a token-mode agent got an auth file")
	}
}
