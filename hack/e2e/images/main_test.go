package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The e2e images reproduce the Dockerfile's manager and adk2goose targets.
func TestFromStageFollowsTheDockerfile(t *testing.T) {
	stages, err := parseDockerfile("../../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for target, bin := range map[string]string{"manager": "/manager", "adk2goose": "/adk2goose"} {
		img, err := fromStage(stages, target, "example/"+target+":1", "BIN")
		if err != nil {
			t.Fatal(err)
		}
		if img.user != "65532:65532" || !slices.Equal(img.entrypoint, []string{bin}) {
			t.Errorf("%s: user %q entrypoint %v", target, img.user, img.entrypoint)
		}
		i := slices.IndexFunc(img.entries, func(e entry) bool { return "/"+e.path == bin })
		if i < 0 || img.entries[i].src != filepath.Join("BIN", target) {
			t.Errorf("%s: no %s copied from BIN/%s in %+v", target, bin, target, img.entries)
		}
	}
}

// A final stage with an instruction the tool does not reproduce is an
// error, not a silently different image.
func TestFromStageRefusesWhatItCannotReproduce(t *testing.T) {
	for name, df := range map[string]string{
		"run":      "FROM gcr.io/distroless/static:nonroot AS manager\nCOPY --from=build /out/manager /manager\nRUN true\nUSER 65532\nENTRYPOINT [\"/manager\"]\n",
		"env":      "FROM gcr.io/distroless/static:nonroot AS manager\nCOPY --from=build /out/manager /manager\nENV A=b\nUSER 65532\nENTRYPOINT [\"/manager\"]\n",
		"base":     "FROM debian:12 AS manager\nCOPY --from=build /out/manager /manager\nUSER 65532\nENTRYPOINT [\"/manager\"]\n",
		"no user":  "FROM gcr.io/distroless/static:nonroot AS manager\nCOPY --from=build /out/manager /manager\nENTRYPOINT [\"/manager\"]\n",
		"not /out": "FROM gcr.io/distroless/static:nonroot AS manager\nCOPY --from=build /src/manager /manager\nUSER 65532\nENTRYPOINT [\"/manager\"]\n",
	} {
		f := filepath.Join(t.TempDir(), "Dockerfile")
		if err := os.WriteFile(f, []byte(df), 0o644); err != nil {
			t.Fatal(err)
		}
		stages, err := parseDockerfile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fromStage(stages, "manager", "x", "bin"); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// The add-on manifests name the images this tool writes.
func TestManifestsNameTheseImages(t *testing.T) {
	ours := []string{PauseRef, CoreDNSRef, LocalPathRef, ShellRef, ClientRef}
	re := regexp.MustCompile(`(?m)^\s*(?:-\s*)?image:\s*(\S+)`)
	files, _ := filepath.Glob("../manifests/*.yaml")
	if len(files) == 0 {
		t.Fatal("no manifests")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			if !slices.Contains(ours, m[1]) {
				t.Errorf("%s: image %s is not one hack/e2e/images writes", f, m[1])
			}
		}
	}
	src, err := os.ReadFile("../../../test/e2e/helpers_test.go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(src), `clientImage = "`+ClientRef+`"`) {
		t.Errorf("test/e2e's clientImage is not %s", ClientRef)
	}
	src, err = os.ReadFile("../../../test/e2e/runtime_test.go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(src), `runtimeImage = "`+RuntimeRef+`"`) {
		t.Errorf("test/e2e's runtimeImage is not %s", RuntimeRef)
	}
}

// The layer holds parents before children and the modes asked for.
func TestLayerTar(t *testing.T) {
	b, err := layerTar([]entry{
		{path: "usr/local/bin/goose", data: "x", mode: 0o755},
		{path: "usr/local/bin/goosed", link: "goose"},
		{path: "home/goose", dir: true, mode: 0o755, uid: 1000, gid: 1000},
	})
	if err != nil {
		t.Fatal(err)
	}
	names := tarNames(t, b)
	want := []string{"usr/", "usr/local/", "usr/local/bin/", "usr/local/bin/goose", "usr/local/bin/goosed", "home/", "home/goose/"}
	if !slices.Equal(names, want) {
		t.Errorf("entries %v, want %v", names, want)
	}
}

func tarNames(t *testing.T, b []byte) []string {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(b))
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
}
