// Package install tests the two ways to install the operator — the kustomize
// build (dist/install.yaml) and the Helm chart — by rendering them with the
// pinned tools and server-side dry-run applying every object to a real
// kube-apiserver (envtest). It lives in the main module, apart from any
// production package, because it needs only testenv and the rendered YAML.
package install

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/yaml"

	"github.com/adk2goose/goose-operator/internal/testing/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.RunShared(m)) }

const (
	release   = "goose-operator"
	helmNS    = "goose-system"
	chartPath = "charts/goose-operator"
)

var root = testenv.RepoRoot()

// object is one rendered YAML document.
type object struct {
	raw []byte
	u   *unstructured.Unstructured
}

func (o object) id() string {
	if ns := o.u.GetNamespace(); ns != "" {
		return o.u.GetKind() + "/" + ns + "/" + o.u.GetName()
	}
	return o.u.GetKind() + "/" + o.u.GetName()
}

var toolMu sync.Mutex

// tool returns bin/<name>, building it with make when absent (`make test`
// builds it beforehand; this serves a plain `go test`).
func tool(t *testing.T, name string) string {
	t.Helper()
	toolMu.Lock()
	defer toolMu.Unlock()
	path := filepath.Join(root, "bin", name)
	if _, err := os.Stat(path); err == nil {
		return path
	}
	cmd := exec.Command("make", "--no-print-directory", path)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make %s: %v\n%s", path, err, out)
	}
	return path
}

func run(t *testing.T, stdin []byte, name string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = root
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, e.String())
	}
	return o.String(), e.String(), err
}

func mustRun(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	out, _, err := run(t, nil, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return []byte(out)
}

func kustomizeBuild(t *testing.T) []byte {
	t.Helper()
	return mustRun(t, tool(t, "kustomize"), "build", "config/default")
}

func helmTemplate(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	base := []string{"template", release, chartPath, "--namespace", helmNS, "--include-crds"}
	out, _, err := run(t, nil, tool(t, "helm"), append(base, args...)...)
	return []byte(out), err
}

func mustHelmTemplate(t *testing.T, args ...string) []object {
	t.Helper()
	out, err := helmTemplate(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return parse(t, out)
}

// parse splits a multi-document stream, dropping empty documents (helm
// leaves some for disabled templates).
func parse(t *testing.T, data []byte) []object {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []object
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			t.Fatalf("bad document: %v\n%s", err, doc)
		}
		if len(u.Object) == 0 {
			continue
		}
		objs = append(objs, object{raw: doc, u: u})
	}
}

func ids(objs []object) []string {
	var s []string
	for _, o := range objs {
		s = append(s, o.id())
	}
	sort.Strings(s)
	return s
}

func find(t *testing.T, objs []object, kind, name string) object {
	t.Helper()
	for _, o := range objs {
		if o.u.GetKind() == kind && o.u.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %s in %v", kind, name, ids(objs))
	return object{}
}

func decode[T any](t *testing.T, o object) *T {
	t.Helper()
	v := new(T)
	if err := yaml.UnmarshalStrict(o.raw, v); err != nil {
		t.Fatalf("%s: %v", o.id(), err)
	}
	return v
}

func join(objs []object) []byte {
	var b bytes.Buffer
	for _, o := range objs {
		b.WriteString("---\n")
		b.Write(o.raw)
		b.WriteString("\n")
	}
	return b.Bytes()
}

// applyDryRun applies the Namespaces and CRDs of objs for real (the other
// objects need them to exist), then server-side dry-run applies every object.
// It returns kubectl's error and stderr, where the apiserver's warnings (such
// as PodSecurity's "would violate") land.
func applyDryRun(t *testing.T, env *testenv.Env, objs []object) (string, error) {
	t.Helper()
	kc := []string{"--kubeconfig", env.Kubeconfig}
	var prereq []object
	var crds []string
	for _, o := range objs {
		switch o.u.GetKind() {
		case "Namespace":
			prereq = append(prereq, o)
		case "CustomResourceDefinition":
			prereq = append(prereq, o)
			crds = append(crds, "crd/"+o.u.GetName())
		}
	}
	if len(prereq) > 0 {
		args := append(slices.Clone(kc), "apply", "--server-side", "--force-conflicts", "--field-manager=install-test", "-f", "-")
		if _, _, err := run(t, join(prereq), env.Kubectl(), args...); err != nil {
			t.Fatal(err)
		}
	}
	if len(crds) > 0 {
		args := append(slices.Clone(kc), append([]string{"wait", "--for=condition=Established", "--timeout=30s"}, crds...)...)
		if _, _, err := run(t, nil, env.Kubectl(), args...); err != nil {
			t.Fatal(err)
		}
	}
	args := append(slices.Clone(kc), "apply", "--server-side", "--dry-run=server", "--field-manager=install-test", "-f", "-")
	stdout, stderr, err := run(t, join(objs), env.Kubectl(), args...)
	if err != nil {
		return stderr, err
	}
	// kubectl prints one "... serverside-applied (server dry run)" line per object.
	if n := strings.Count(stdout, "(server dry run)"); n != len(objs) {
		return stderr, fmt.Errorf("dry run applied %d of %d objects:\n%s", n, len(objs), stdout)
	}
	return stderr, nil
}

// mustApplyDryRun also fails on any apiserver warning: a PodSecurity warning
// in a namespace labelled enforce=restricted means pods would be rejected.
func mustApplyDryRun(t *testing.T, env *testenv.Env, objs []object) {
	t.Helper()
	stderr, err := applyDryRun(t, env, objs)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stderr, "Warning") {
		t.Errorf("apiserver warnings:\n%s", stderr)
	}
}

// namespace is the release namespace (helmNS) Helm expects to exist,
// labelled like config/manager's so PodSecurity checks the Deployment.
func namespace() object { return namespaceNamed(helmNS) }

// namespaceNamed is a Namespace that enforces the restricted standard.
func namespaceNamed(name string) object {
	raw := []byte(fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: %s
  labels:
    pod-security.kubernetes.io/enforce: restricted
    pod-security.kubernetes.io/warn: restricted
`, name))
	u := &unstructured.Unstructured{}
	_ = yaml.Unmarshal(raw, &u.Object) // a constant document
	return object{raw: raw, u: u}
}

// restricted returns the restricted Pod Security Standard violations of d.
func restricted(d *appsv1.Deployment) []string {
	evaluator, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		return []string{err.Error()}
	}
	lv := psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}
	var bad []string
	for _, r := range evaluator.EvaluatePod(lv, &d.Spec.Template.ObjectMeta, &d.Spec.Template.Spec) {
		if !r.Allowed {
			bad = append(bad, r.ForbiddenReason+": "+r.ForbiddenDetail)
		}
	}
	return bad
}
