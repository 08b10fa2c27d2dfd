package install

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/adk2goose/goose-operator/internal/testing/testenv"
)

const crdName = "gooseagents.agents.adk2goose.dev"

// TestKustomizeInstall: config/default renders the expected objects, equals
// the committed dist/install.yaml, and applies cleanly to a real apiserver.
func TestKustomizeInstall(t *testing.T) {
	out := kustomizeBuild(t)
	objs := parse(t, out)
	const ns = "goose-operator-system"
	want := []string{
		"ClusterRole/goose-operator-manager-role",
		"ClusterRole/goose-operator-metrics-auth-role",
		"ClusterRole/goose-operator-metrics-reader",
		"ClusterRoleBinding/goose-operator-manager-rolebinding",
		"ClusterRoleBinding/goose-operator-metrics-auth-rolebinding",
		"CustomResourceDefinition/" + crdName,
		"Deployment/" + ns + "/goose-operator-controller-manager",
		"Namespace/" + ns,
		"Role/" + ns + "/goose-operator-leader-election-role",
		"RoleBinding/" + ns + "/goose-operator-leader-election-rolebinding",
		"Service/" + ns + "/goose-operator-controller-manager-metrics-service",
		"ServiceAccount/" + ns + "/goose-operator-controller-manager",
	}
	if diff := cmp.Diff(want, ids(objs)); diff != "" {
		t.Errorf("rendered objects (-want +got):\n%s", diff)
	}
	dist, err := os.ReadFile(filepath.Join(root, "dist", "install.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dist, out) {
		t.Error("dist/install.yaml is stale: run `make build-installer`")
	}
	d := decode[appsv1.Deployment](t, find(t, objs, "Deployment", "goose-operator-controller-manager"))
	if bad := restricted(d); len(bad) > 0 {
		t.Errorf("manager Deployment violates the restricted Pod Security Standard: %v", bad)
	}
	mustApplyDryRun(t, testenv.Shared(t), objs)
}

// TestHelmDefault: the chart with default values renders the expected
// objects, mirrors config/ (CRD, ClusterRole rules, manager arguments), meets
// the restricted standard and applies cleanly.
func TestHelmDefault(t *testing.T) {
	objs := mustHelmTemplate(t)
	want := []string{
		"ClusterRole/goose-operator-manager-role",
		"ClusterRole/goose-operator-metrics-auth-role",
		"ClusterRole/goose-operator-metrics-reader",
		"ClusterRoleBinding/goose-operator-manager-rolebinding",
		"ClusterRoleBinding/goose-operator-metrics-auth-rolebinding",
		"CustomResourceDefinition/" + crdName,
		"Deployment/" + helmNS + "/goose-operator-controller-manager",
		"Role/" + helmNS + "/goose-operator-leader-election-role",
		"RoleBinding/" + helmNS + "/goose-operator-leader-election-rolebinding",
		"Service/" + helmNS + "/goose-operator-metrics",
		"ServiceAccount/" + helmNS + "/goose-operator-controller-manager",
	}
	if diff := cmp.Diff(want, ids(objs)); diff != "" {
		t.Errorf("rendered objects (-want +got):\n%s", diff)
	}

	base, err := os.ReadFile(filepath.Join(root, "config", "crd", "bases", "agents.adk2goose.dev_gooseagents.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	wantCRD := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(base, wantCRD); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantCRD, decode[apiextensionsv1.CustomResourceDefinition](t, find(t, objs, "CustomResourceDefinition", crdName))); diff != "" {
		t.Errorf("chart CRD differs from config/crd/bases (-want +got):\n%s", diff)
	}

	roleYAML, err := os.ReadFile(filepath.Join(root, "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	wantRole := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(roleYAML, wantRole); err != nil {
		t.Fatal(err)
	}
	gotRole := decode[rbacv1.ClusterRole](t, find(t, objs, "ClusterRole", "goose-operator-manager-role"))
	if len(wantRole.Rules) == 0 || !cmp.Equal(wantRole.Rules, gotRole.Rules) {
		t.Errorf("chart ClusterRole rules differ from config/rbac/role.yaml (-want +got):\n%s", cmp.Diff(wantRole.Rules, gotRole.Rules))
	}

	// The chart's defaults run the manager as config/manager does; it only
	// spells out two flags kustomize leaves at their defaults, and selects
	// the activator's pods by its release's labels.
	d := decode[appsv1.Deployment](t, find(t, objs, "Deployment", "goose-operator-controller-manager"))
	kd := decode[appsv1.Deployment](t, find(t, parse(t, kustomizeBuild(t)), "Deployment", "goose-operator-controller-manager"))
	wantArgs := append(slices.Clone(kd.Spec.Template.Spec.Containers[0].Args), "--metrics-secure=true", "--stats-interval=30s",
		"--activator-pod-selector=app.kubernetes.io/name=goose-operator,app.kubernetes.io/instance=goose-operator,app.kubernetes.io/component=manager")
	gotArgs := d.Spec.Template.Spec.Containers[0].Args
	slices.Sort(wantArgs)
	slices.Sort(gotArgs)
	if diff := cmp.Diff(wantArgs, gotArgs); diff != "" {
		t.Errorf("manager args, chart vs config/manager (-want +got):\n%s", diff)
	}
	if got, want := d.Spec.Template.Spec.Containers[0].Image, "ghcr.io/adk2goose/goose-operator:dev"; got != want {
		t.Errorf("image %q, want %q", got, want)
	}
	if diff := cmp.Diff(kd.Spec.Template.Spec.Containers[0].Resources, d.Spec.Template.Spec.Containers[0].Resources); diff != "" {
		t.Errorf("resources, chart vs config/manager (-want +got):\n%s", diff)
	}
	if bad := restricted(d); len(bad) > 0 {
		t.Errorf("manager Deployment violates the restricted Pod Security Standard: %v", bad)
	}
	mustApplyDryRun(t, testenv.Shared(t), append([]object{namespace()}, objs...))
}

// TestHelmAllOptions: a values file that sets every option renders each of
// them and applies cleanly, the ServiceMonitor against a stand-in CRD.
func TestHelmAllOptions(t *testing.T) {
	objs := mustHelmTemplate(t, "-f", "test/install/testdata/values-all.yaml")
	want := []string{
		"ClusterRole/goose-operator-manager-role",
		"ClusterRole/goose-operator-metrics-auth-role",
		"ClusterRole/goose-operator-metrics-reader",
		"ClusterRoleBinding/goose-operator-manager-rolebinding",
		"ClusterRoleBinding/goose-operator-metrics-auth-rolebinding",
		"ConfigMap/monitoring/goose-operator-dashboard",
		"CustomResourceDefinition/" + crdName,
		"Deployment/" + helmNS + "/goose-operator-controller-manager",
		"PrometheusRule/" + helmNS + "/goose-operator-alerts",
		"Role/" + helmNS + "/goose-operator-leader-election-role",
		"RoleBinding/" + helmNS + "/goose-operator-leader-election-rolebinding",
		"Service/" + helmNS + "/goose-operator-metrics",
		"ServiceAccount/" + helmNS + "/goose-manager",
		"ServiceMonitor/" + helmNS + "/goose-operator-metrics",
	}
	if diff := cmp.Diff(want, ids(objs)); diff != "" {
		t.Errorf("rendered objects (-want +got):\n%s", diff)
	}
	d := decode[appsv1.Deployment](t, find(t, objs, "Deployment", "goose-operator-controller-manager"))
	spec := d.Spec.Template.Spec
	c := spec.Containers[0]
	checks := map[string]bool{
		"replicas 2":           d.Spec.Replicas != nil && *d.Spec.Replicas == 2,
		"image":                c.Image == "registry.example.com/goose-operator:v0.1.0" && c.ImagePullPolicy == corev1.PullAlways,
		"imagePullSecrets":     len(spec.ImagePullSecrets) == 1 && spec.ImagePullSecrets[0].Name == "registry-credentials",
		"serviceAccountName":   spec.ServiceAccountName == "goose-manager",
		"nodeSelector":         spec.NodeSelector["kubernetes.io/os"] == "linux",
		"tolerations":          len(spec.Tolerations) == 1 && spec.Tolerations[0].Key == "dedicated",
		"affinity":             spec.Affinity != nil && spec.Affinity.PodAntiAffinity != nil,
		"podAnnotations":       d.Spec.Template.Annotations["example.com/scrape"] == "true",
		"podLabels":            d.Spec.Template.Labels["team"] == "agents",
		"resources":            c.Resources.Limits.Cpu().String() == "1" && c.Resources.Requests.Memory().String() == "256Mi",
		"--leader-elect":       slices.Contains(c.Args, "--leader-elect"),
		"--goose-image":        slices.Contains(c.Args, "--goose-image=registry.example.com/goose:1.43.0"),
		"--adk2goose-image":    slices.Contains(c.Args, "--adk2goose-image=registry.example.com/adk2goose:v0.1.0"),
		"--stats-interval":     slices.Contains(c.Args, "--stats-interval=1m"),
		"--max-concurrent":     slices.Contains(c.Args, "--max-concurrent-reconciles=8"),
		"extraArgs":            slices.Contains(c.Args, "--zap-log-level=debug"),
		"serviceMonitor label": find(t, objs, "ServiceMonitor", "goose-operator-metrics").u.GetLabels()["release"] == "prometheus",
		"dashboard folder":     find(t, objs, "ConfigMap", "goose-operator-dashboard").u.GetAnnotations()["k8s-sidecar-target-directory"] == "Agents",
		"dashboard labels":     find(t, objs, "ConfigMap", "goose-operator-dashboard").u.GetLabels()["team"] == "agents",
		"prometheusRule label": find(t, objs, "PrometheusRule", "goose-operator-alerts").u.GetLabels()["release"] == "prometheus",
	}
	for name, ok := range checks {
		if !ok {
			t.Errorf("values-all.yaml: %s not rendered", name)
		}
	}
	if bad := restricted(d); len(bad) > 0 {
		t.Errorf("manager Deployment violates the restricted Pod Security Standard: %v", bad)
	}
	applied := []object{namespace(), namespaceNamed("monitoring")}
	for _, f := range []string{"servicemonitor-crd.yaml", "prometheusrule-crd.yaml"} {
		crd, err := os.ReadFile(filepath.Join(root, "test", "install", "testdata", f))
		if err != nil {
			t.Fatal(err)
		}
		applied = append(applied, parse(t, crd)...)
	}
	mustApplyDryRun(t, testenv.Shared(t), append(applied, objs...))
}

// TestHelmMonitoring: grafanaDashboard.enabled renders the dashboard file as
// a ConfigMap the Grafana sidecar picks up (label grafana_dashboard: "1",
// the folder annotation), prometheusRule.enabled the rule file's groups as
// a PrometheusRule with the extra labels; both are off by default.
func TestHelmMonitoring(t *testing.T) {
	for _, id := range ids(mustHelmTemplate(t)) {
		if strings.HasPrefix(id, "PrometheusRule/") || strings.HasPrefix(id, "ConfigMap/") {
			t.Errorf("rendered by default: %s", id)
		}
	}
	objs := mustHelmTemplate(t, "--set", "grafanaDashboard.enabled=true", "--set", "prometheusRule.enabled=true",
		"--set", "prometheusRule.labels.release=prometheus", "--set", "grafanaDashboard.folder=Agents")

	cm := decode[corev1.ConfigMap](t, find(t, objs, "ConfigMap", "goose-operator-dashboard"))
	if cm.Namespace != helmNS || cm.Labels["grafana_dashboard"] != "1" || cm.Annotations["grafana_folder"] != "Agents" {
		t.Errorf("dashboard ConfigMap: namespace %q, labels %v, annotations %v", cm.Namespace, cm.Labels, cm.Annotations)
	}
	dashboard, err := os.ReadFile(filepath.Join(root, chartPath, "files", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var want, got any
	if err := json.Unmarshal(dashboard, &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(cm.Data["goose-operator-agents.json"]), &got); err != nil {
		t.Fatalf("the ConfigMap's dashboard is not JSON: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("dashboard in the ConfigMap differs from files/grafana-dashboard.json (-want +got):\n%s", diff)
	}

	rule := find(t, objs, "PrometheusRule", "goose-operator-alerts").u
	if rule.GetLabels()["release"] != "prometheus" || rule.GetNamespace() != helmNS {
		t.Errorf("PrometheusRule: namespace %q, labels %v", rule.GetNamespace(), rule.GetLabels())
	}
	rules, err := os.ReadFile(filepath.Join(root, chartPath, "files", "prometheus-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var wantRules map[string]any
	if err := yaml.Unmarshal(rules, &wantRules); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantRules["groups"], rule.Object["spec"].(map[string]any)["groups"]); diff != "" {
		t.Errorf("PrometheusRule groups differ from files/prometheus-rules.yaml (-want +got):\n%s", diff)
	}
}

// TestHelmMetricsVariants: plain-HTTP and disabled metrics change the
// manager's flags, its port and the objects rendered.
func TestHelmMetricsVariants(t *testing.T) {
	insecure := mustHelmTemplate(t, "--set", "metrics.secure=false")
	c := decode[appsv1.Deployment](t, find(t, insecure, "Deployment", "goose-operator-controller-manager")).Spec.Template.Spec.Containers[0]
	if !slices.Contains(c.Args, "--metrics-bind-address=:8080") || !slices.Contains(c.Args, "--metrics-secure=false") {
		t.Errorf("metrics.secure=false args: %v", c.Args)
	}
	svc := decode[corev1.Service](t, find(t, insecure, "Service", "goose-operator-metrics"))
	if p := svc.Spec.Ports[0]; p.Port != 8080 || p.Name != "http" {
		t.Errorf("metrics.secure=false service port: %+v", p)
	}
	for _, id := range ids(insecure) {
		if strings.Contains(id, "metrics-auth") {
			t.Errorf("metrics.secure=false still renders %s", id)
		}
	}

	off := mustHelmTemplate(t, "--set", "metrics.enabled=false", "--set", "metrics.serviceMonitor.enabled=true", "--set", "leaderElection.enabled=false")
	c = decode[appsv1.Deployment](t, find(t, off, "Deployment", "goose-operator-controller-manager")).Spec.Template.Spec.Containers[0]
	if !slices.Contains(c.Args, "--metrics-bind-address=0") || slices.Contains(c.Args, "--leader-elect") {
		t.Errorf("metrics and leader election off: args %v", c.Args)
	}
	for _, id := range ids(off) {
		if strings.Contains(id, "metrics") || strings.Contains(id, "leader-election") {
			t.Errorf("metrics and leader election off: still renders %s", id)
		}
	}
}

// TestHelmRejectsBadValues: values that would make a broken install fail at
// render time.
func TestHelmRejectsBadValues(t *testing.T) {
	for name, args := range map[string][]string{
		"replicas without leader election": {"--set", "replicaCount=2", "--set", "leaderElection.enabled=false"},
		"no ServiceAccount name":           {"--set", "serviceAccount.create=false"},
		"empty goose image":                {"--set", "agentDefaults.gooseImage="},
	} {
		if _, err := helmTemplate(t, args...); err == nil {
			t.Errorf("%s: rendered without error", name)
		}
	}
}

// TestHelmLint: `helm lint --strict` passes with the default and the
// all-options values.
func TestHelmLint(t *testing.T) {
	mustRun(t, tool(t, "helm"), "lint", "--strict", chartPath)
	mustRun(t, tool(t, "helm"), "lint", "--strict", chartPath, "-f", "test/install/testdata/values-all.yaml")
}

// TestChartCopiesMatchConfig: the chart's CRDs and manager-role rules are
// byte copies of config/ (`make manifests` writes them), file for file.
func TestChartCopiesMatchConfig(t *testing.T) {
	chart := filepath.Join(root, chartPath)
	bases := filepath.Join(root, "config", "crd", "bases")
	names := func(dir string) []string {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, e := range entries {
			s = append(s, e.Name())
		}
		return s
	}
	if diff := cmp.Diff(names(bases), names(filepath.Join(chart, "crds"))); diff != "" {
		t.Fatalf("chart crds/ vs config/crd/bases (-want +got):\n%s", diff)
	}
	pairs := [][2]string{{filepath.Join(root, "config", "rbac", "role.yaml"), filepath.Join(chart, "files", "manager-role.yaml")}}
	for _, n := range names(bases) {
		pairs = append(pairs, [2]string{filepath.Join(bases, n), filepath.Join(chart, "crds", n)})
	}
	for _, p := range pairs {
		a, errA := os.ReadFile(p[0])
		b, errB := os.ReadFile(p[1])
		if errA != nil || errB != nil {
			t.Fatal(errA, errB)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs from %s: run `make manifests`", p[1], p[0])
		}
	}
}

// TestChecksCanFail guards the checks above: the server-side dry run must
// reject an invalid object, the apiserver must warn about a privileged pod in
// a restricted namespace, and the evaluator must flag it.
func TestChecksCanFail(t *testing.T) {
	env := testenv.Shared(t)
	objs := mustHelmTemplate(t)
	dep := find(t, objs, "Deployment", "goose-operator-controller-manager")
	d := decode[appsv1.Deployment](t, dep)

	invalid := d.DeepCopy()
	invalid.Spec.Template.Spec.Containers[0].Name = "Not_A_DNS_Label"
	if _, err := applyDryRun(t, env, []object{namespace(), toObject(t, invalid)}); err == nil {
		t.Error("an invalid container name passed the server-side dry run")
	}

	priv := d.DeepCopy()
	yes := true
	priv.Spec.Template.Spec.Containers[0].SecurityContext.Privileged = &yes
	// The apiserver rejects privileged with allowPrivilegeEscalation false.
	priv.Spec.Template.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = nil
	if len(restricted(priv)) == 0 {
		t.Error("a privileged container passed the restricted check")
	}
	stderr, err := applyDryRun(t, env, []object{namespace(), toObject(t, priv)})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, "would violate PodSecurity") {
		t.Errorf("no PodSecurity warning for a privileged pod; stderr:\n%s", stderr)
	}
}

func toObject(t *testing.T, d *appsv1.Deployment) object {
	t.Helper()
	d.APIVersion, d.Kind = "apps/v1", "Deployment"
	raw, err := yaml.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return parse(t, raw)[0]
}

// TestReadmeInstall runs the README's install commands for real against the
// apiserver (no pods run there): the Helm commands in their own namespace,
// then `kubectl apply --server-side -f dist/install.yaml`. It removes what
// it created, except Namespaces (envtest has no namespace controller to
// finish deleting them) and the CRD the other tests share.
func TestReadmeInstall(t *testing.T) {
	env := testenv.Shared(t)
	const ns = "goose-readme"
	kubectl := func(args ...string) string {
		t.Helper()
		return string(mustRun(t, env.Kubectl(), append([]string{"--kubeconfig", env.Kubeconfig}, args...)...))
	}
	helm := func(args ...string) {
		t.Helper()
		mustRun(t, tool(t, "helm"), append([]string{"--kubeconfig", env.Kubeconfig}, args...)...)
	}
	// Tolerate a namespace left by an earlier run in this apiserver (-count=2).
	if _, _, err := run(t, nil, env.Kubectl(), "--kubeconfig", env.Kubeconfig, "create", "namespace", ns); err != nil && !strings.Contains(err.Error(), "AlreadyExists") {
		t.Fatal(err)
	}
	kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted")
	helm("install", "goose-operator", chartPath, "-n", ns,
		"--set", "image.repository=registry.example.com/goose-operator", "--set", "image.tag=v0.1.0",
		"--set", "agentDefaults.adk2gooseImage=registry.example.com/adk2goose:v0.1.0")
	img := kubectl("get", "deployment", "-n", ns, "goose-operator-controller-manager", "-o", "jsonpath={.spec.template.spec.containers[0].image}")
	if img != "registry.example.com/goose-operator:v0.1.0" {
		t.Errorf("helm install: manager image %q", img)
	}
	helm("uninstall", "goose-operator", "-n", ns)

	kubectl("apply", "--server-side", "-f", "dist/install.yaml")
	if got := kubectl("get", "deployment", "-n", "goose-operator-system", "goose-operator-controller-manager", "-o", "name"); got != "deployment.apps/goose-operator-controller-manager\n" {
		t.Errorf("kubectl apply dist/install.yaml: got %q", got)
	}
	var created []object
	for _, o := range parse(t, kustomizeBuild(t)) {
		if k := o.u.GetKind(); k != "Namespace" && k != "CustomResourceDefinition" {
			created = append(created, o)
		}
	}
	if _, _, err := run(t, join(created), env.Kubectl(), "--kubeconfig", env.Kubeconfig, "delete", "--ignore-not-found", "-f", "-"); err != nil {
		t.Error(err)
	}
}
