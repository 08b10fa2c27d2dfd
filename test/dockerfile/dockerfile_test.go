// Package dockerfile checks the repository's Dockerfile without a container
// engine: its targets, final stages and build commands, parsed with BuildKit's
// parser (the one `docker build` uses), against `make build`.
package dockerfile

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
)

const root = "../.."

func parseStages(t *testing.T, path string) []instructions.Stage {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := parser.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range res.Warnings {
		t.Errorf("%s: parser warning: %s", path, w.Short)
	}
	stages, _, err := instructions.Parse(res.AST, nil)
	if err != nil {
		t.Fatal(err)
	}
	return stages
}

// goBuild is one `go build` invocation: its environment assignments,
// flags and package, with -o dropped (output paths differ by design).
type goBuild struct {
	env   map[string]string
	flags []string
	pkg   string
}

// goBuilds extracts the go build commands of a shell script, split on && and
// newlines, words expanded as a shell would (quotes, no variables).
func goBuilds(t *testing.T, script string) []goBuild {
	t.Helper()
	lex := shell.NewLex('\\')
	var out []goBuild
	for _, line := range strings.FieldsFunc(script, func(r rune) bool { return r == '\n' || r == ';' }) {
		for _, cmd := range strings.Split(line, "&&") {
			words, err := lex.ProcessWords(cmd, shell.EnvsFromSlice(nil))
			if err != nil {
				t.Fatalf("%q: %v", cmd, err)
			}
			b := goBuild{env: map[string]string{}}
			i := 0
			for ; i < len(words) && strings.Contains(words[i], "=") && !strings.HasPrefix(words[i], "-"); i++ {
				k, v, _ := strings.Cut(words[i], "=")
				b.env[k] = v
			}
			if len(words) < i+2 || filepath.Base(words[i]) != "go" || words[i+1] != "build" {
				continue
			}
			for j := i + 2; j < len(words); j++ {
				switch w := words[j]; {
				case w == "-o":
					j++
				case strings.HasPrefix(w, "-"):
					b.flags = append(b.flags, w)
				default:
					b.pkg = w
				}
			}
			out = append(out, b)
		}
	}
	return out
}

// makeBuild returns the commands `make build` would run, without running them.
func makeBuild(t *testing.T) []goBuild {
	t.Helper()
	cmd := exec.Command("make", "--no-print-directory", "-n", "build")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("make -n build: %v", err)
	}
	return goBuilds(t, string(out))
}

func TestDockerfile(t *testing.T) {
	stages := parseStages(t, filepath.Join(root, "Dockerfile"))
	byName := map[string]instructions.Stage{}
	for _, s := range stages {
		byName[s.Name] = s
	}

	// Two targets, each a distroless non-root image running its own binary as 65532.
	for target, binary := range map[string]string{"manager": "/manager", "adk2goose": "/adk2goose"} {
		s, ok := byName[target]
		if !ok {
			t.Errorf("no stage %q (`make docker-build` builds --target %s)", target, target)
			continue
		}
		if !strings.HasPrefix(s.BaseName, "gcr.io/distroless/") || !strings.HasSuffix(s.BaseName, ":nonroot") {
			t.Errorf("stage %s: base %q, want a gcr.io/distroless/...:nonroot image", target, s.BaseName)
		}
		var user string
		var entrypoint []string
		var runs int
		for _, c := range s.Commands {
			switch c := c.(type) {
			case *instructions.UserCommand:
				user = c.User
			case *instructions.EntrypointCommand:
				entrypoint = c.CmdLine
			case *instructions.RunCommand:
				runs++
			}
		}
		if user != "65532:65532" && user != "65532" {
			t.Errorf("stage %s: USER %q, want 65532", target, user)
		}
		if !slices.Equal(entrypoint, []string{binary}) {
			t.Errorf("stage %s: ENTRYPOINT %v, want [%s]", target, entrypoint, binary)
		}
		if runs > 0 {
			t.Errorf("stage %s: %d RUN instructions; the final stage has no shell", target, runs)
		}
	}
	if last := stages[len(stages)-1].Name; last != "manager" && last != "adk2goose" {
		t.Errorf("last stage %q: a plain `docker build` should yield one of the two images", last)
	}

	// The build stage runs the same go builds as `make build`.
	var docker []goBuild
	for _, s := range stages {
		for _, c := range s.Commands {
			if r, ok := c.(*instructions.RunCommand); ok {
				docker = append(docker, goBuilds(t, strings.Join(r.CmdLine, " "))...)
			}
		}
	}
	for _, d := range sameBuilds(imageBuilds(makeBuild(t)), docker) {
		t.Error(d)
	}
}

// cliOnly are the binaries `make build` builds for people's machines, not
// for an image: users install them with go install.
var cliOnly = []string{"./cmd/goosectl"}

// imageBuilds drops the CLI-only builds from make build's.
func imageBuilds(builds []goBuild) []goBuild {
	return slices.DeleteFunc(builds, func(b goBuild) bool { return slices.Contains(cliOnly, b.pkg) })
}

// sameBuilds lists how the Dockerfile's go builds differ from make build's.
func sameBuilds(want, got []goBuild) []string {
	if len(want) == 0 {
		return []string{"`make -n build` shows no go build"}
	}
	if len(got) != len(want) {
		return []string{fmt.Sprintf("Dockerfile has %d go builds, make build %d", len(got), len(want))}
	}
	var diffs []string
	for i, w := range want {
		g := got[i]
		if g.pkg != w.pkg || !slices.Equal(g.flags, w.flags) {
			diffs = append(diffs, fmt.Sprintf("go build %d: Dockerfile %s %v, make build %s %v", i, g.pkg, g.flags, w.pkg, w.flags))
		}
		for k, v := range w.env {
			if g.env[k] != v {
				diffs = append(diffs, fmt.Sprintf("go build %s: Dockerfile %s=%q, make build %q", w.pkg, k, g.env[k], v))
			}
		}
		if g.env["CGO_ENABLED"] != "0" || !slices.Contains(g.flags, "-trimpath") {
			diffs = append(diffs, fmt.Sprintf("go build %s: not static and reproducible (CGO_ENABLED=0, -trimpath)", g.pkg))
		}
	}
	return diffs
}

// TestBuildComparisonCanFail guards sameBuilds: a Dockerfile build that
// drops -trimpath or cgo=0, builds another package or is missing is reported.
func TestBuildComparisonCanFail(t *testing.T) {
	want := goBuilds(t, "CGO_ENABLED=0 go build -trimpath -o bin/manager ./cmd/manager")
	if d := sameBuilds(want, goBuilds(t, "CGO_ENABLED=0 GOOS=linux go build -trimpath -o /out/manager ./cmd/manager")); len(d) > 0 {
		t.Errorf("an equivalent build is reported: %v", d)
	}
	for name, script := range map[string]string{
		"no -trimpath":   "CGO_ENABLED=0 go build -o /out/manager ./cmd/manager",
		"cgo":            "go build -trimpath -o /out/manager ./cmd/manager",
		"other package":  "CGO_ENABLED=0 go build -trimpath -o /out/manager ./cmd/adk2goose",
		"missing builds": "echo nothing",
	} {
		if len(sameBuilds(want, goBuilds(t, script))) == 0 {
			t.Errorf("%s: not reported", name)
		}
	}
}
