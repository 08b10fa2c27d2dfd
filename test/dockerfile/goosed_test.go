package dockerfile

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"go.yaml.in/yaml/v3"
)

// officialGooseRuntime is the base and the libraries of the official goose
// image's runtime stage (goose's root Dockerfile, reference goose-rest-api.md
// §6): goose's release builds link against them.
var officialGooseRuntime = struct {
	base string
	libs []string
}{"debian:bookworm-slim", []string{"ca-certificates", "libssl3", "libdbus-1-3", "libgomp1", "libxcb1"}}

// imageFacts is what a single-stage Dockerfile sets for its running container.
type imageFacts struct {
	base       string
	env        map[string]string
	user       string
	entrypoint []string
	cmd        []string
	expose     []string
	copies     []*instructions.CopyCommand
	runs       []string
}

func factsOf(t *testing.T, s instructions.Stage) imageFacts {
	t.Helper()
	f := imageFacts{base: s.BaseName, env: map[string]string{}}
	for _, c := range s.Commands {
		switch c := c.(type) {
		case *instructions.EnvCommand:
			for _, kv := range c.Env {
				f.env[kv.Key] = kv.Value
			}
		case *instructions.UserCommand:
			f.user = c.User
		case *instructions.EntrypointCommand:
			f.entrypoint = c.CmdLine
		case *instructions.CmdCommand:
			f.cmd = c.CmdLine
		case *instructions.ExposeCommand:
			f.expose = append(f.expose, c.Ports...)
		case *instructions.CopyCommand:
			f.copies = append(f.copies, c)
		case *instructions.RunCommand:
			f.runs = append(f.runs, strings.Join(c.CmdLine, " "))
		}
	}
	return f
}

// goosedPod is what the operator runs in a goosed image: the goose and init
// containers of controllers/render's golden StatefulSet for the goosed sample.
type goosedPod struct {
	command, args []string
	env           map[string]string
	runAsUser     int64
	initShell     string
}

func renderedGoosedPod(t *testing.T) goosedPod {
	t.Helper()
	type container struct {
		Name    string   `yaml:"name"`
		Command []string `yaml:"command"`
		Args    []string `yaml:"args"`
		Env     []struct {
			Name  string `yaml:"name"`
			Value string `yaml:"value"`
		} `yaml:"env"`
	}
	var sts struct {
		Kind string `yaml:"kind"`
		Spec struct {
			Template struct {
				Spec struct {
					SecurityContext struct {
						RunAsUser int64 `yaml:"runAsUser"`
					} `yaml:"securityContext"`
					Containers     []container `yaml:"containers"`
					InitContainers []container `yaml:"initContainers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	b, err := os.ReadFile(filepath.Join(root, "controllers/render/testdata/golden/goosed.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for sts.Kind != "StatefulSet" {
		if err := dec.Decode(&sts); errors.Is(err, io.EOF) {
			t.Fatal("the golden goosed render has no StatefulSet")
		} else if err != nil {
			t.Fatal(err)
		}
	}
	pod := sts.Spec.Template.Spec
	out := goosedPod{env: map[string]string{}, runAsUser: pod.SecurityContext.RunAsUser}
	for _, c := range pod.Containers {
		if c.Name == "goose" {
			out.command, out.args = c.Command, c.Args
			for _, e := range c.Env {
				out.env[e.Name] = e.Value
			}
		}
	}
	for _, c := range pod.InitContainers {
		if c.Name == "goose-init" && len(c.Command) > 0 {
			out.initShell = c.Command[0]
		}
	}
	if len(out.command) == 0 || out.runAsUser == 0 || out.initShell == "" {
		t.Fatalf("the golden goosed render lacks the goose container's command, the pod's runAsUser or the init container: %+v", out)
	}
	return out
}

// TestGoosedDockerfile checks hack/goosed.Dockerfile against what the
// operator runs in that image, so an image built from it works as
// `server.image` of a `flavor: goosed` agent.
func TestGoosedDockerfile(t *testing.T) {
	stages := parseStages(t, filepath.Join(root, "hack/goosed.Dockerfile"))
	if len(stages) != 1 {
		t.Fatalf("%d stages, want 1: the file packages a binary, it builds nothing", len(stages))
	}
	img := factsOf(t, stages[0])
	pod := renderedGoosedPod(t)

	// The official goose runtime, so release-built binaries find their libraries,
	// and a shell for the operator's init container.
	if img.base != officialGooseRuntime.base {
		t.Errorf("base %q, want %q as the official goose image", img.base, officialGooseRuntime.base)
	}
	install := strings.Join(img.runs, "\n")
	for _, lib := range officialGooseRuntime.libs {
		if !slices.Contains(strings.Fields(install), lib) {
			t.Errorf("runtime package %s is not installed", lib)
		}
	}
	if pod.initShell != "/bin/sh" {
		t.Errorf("the init container runs %q; the check that the base has it assumes /bin/sh", pod.initShell)
	}

	// The binary comes from the build context named goosed, onto PATH where
	// the operator's bare `goosed` command finds it.
	var copied string
	for _, c := range img.copies {
		if c.From == "goosed" && slices.Equal(c.SourcePaths, []string{"goosed"}) {
			copied = c.DestPath
		}
	}
	if copied == "" {
		t.Fatal("no COPY --from=goosed goosed: the binary must come from the goosed build context")
	}
	if path.Dir(copied) != "/usr/local/bin" || path.Base(copied) != pod.command[0] {
		t.Errorf("goosed copied to %s; the operator runs %q, so it must be /usr/local/bin/%s (on PATH)", copied, pod.command[0], pod.command[0])
	}
	if p, ok := img.env["PATH"]; ok && !slices.Contains(strings.Split(p, ":"), "/usr/local/bin") {
		t.Errorf("ENV PATH %q drops /usr/local/bin", p)
	}
	if !slices.Equal(img.entrypoint, []string{copied}) || !slices.Equal(img.cmd, pod.args) {
		t.Errorf("ENTRYPOINT %v CMD %v, want [%s] %v as the operator runs it", img.entrypoint, img.cmd, copied, pod.args)
	}
	ranBinary := slices.ContainsFunc(img.runs, func(r string) bool { return strings.HasPrefix(r, copied+" --help") })
	if !ranBinary {
		t.Error("no RUN of goosed --help: a binary that cannot run on this base should fail the build, not the pod")
	}
	for _, r := range img.runs {
		for _, w := range []string{"cargo", "rustup", "git clone", "curl -", "wget"} {
			if strings.Contains(r, w) {
				t.Errorf("RUN %q: the file packages a goosed the user brings and fetches or builds no goose code", r)
			}
		}
	}

	// Same user, port and paths as the operator's pod, so `docker run` of the
	// image alone behaves as it does in the cluster.
	uid, _, _ := strings.Cut(img.user, ":")
	if uid != strconv.FormatInt(pod.runAsUser, 10) {
		t.Errorf("USER %q, want uid %d as the operator's pod runs", img.user, pod.runAsUser)
	}
	if port := pod.env["GOOSE_PORT"]; !slices.Contains(img.expose, port) || img.env["GOOSE_PORT"] != port {
		t.Errorf("EXPOSE %v, ENV GOOSE_PORT %q; the operator uses port %s", img.expose, img.env["GOOSE_PORT"], port)
	}
	for _, k := range []string{"HOME", "GOOSE_PATH_ROOT", "GOOSE_TLS", "GOOSE_DISABLE_KEYRING"} {
		if img.env[k] != pod.env[k] {
			t.Errorf("ENV %s=%q, the operator sets %q", k, img.env[k], pod.env[k])
		}
	}
}

// TestDockerBuildGoosed: the make target refuses to run without a binary to
// package, and otherwise builds this Dockerfile with the goosed context.
func TestDockerBuildGoosed(t *testing.T) {
	cmd := exec.Command("make", "--no-print-directory", "docker-build-goosed", "GOOSED_DIR="+t.TempDir(), "CONTAINER_TOOL=false")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "GOOSED_DIR must name a directory holding a goosed binary") {
		t.Fatalf("make docker-build-goosed without a binary: %v\n%s", err, out)
	}

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "goosed"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command("make", "--no-print-directory", "-n", "docker-build-goosed", "GOOSED_DIR="+dir, "IMG_GOOSED=r.example/goosed:1.41.0", "CONTAINER_TOOL=docker")
	cmd.Dir = root
	out, err = cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "docker build -f hack/goosed.Dockerfile --build-context goosed=" + dir + " -t r.example/goosed:1.41.0 hack"
	if !strings.Contains(string(out), want) {
		t.Errorf("make -n docker-build-goosed:\n%s\nwant the line %q", out, want)
	}
}
