// Package layout_test checks the arrows between the repository's trees:
// internal/ holds what the operator, the sidecar and the tools share, so
// no package under it may import the sidecar (an arrow up).
package layout_test

import (
	"go/build"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/adk2goose/goose-operator/internal/testing/testenv"
)

const module = "github.com/adk2goose/goose-operator/"

func TestInternalDoesNotImportTheSidecar(t *testing.T) {
	root := filepath.Join(testenv.RepoRoot(), "internal")
	checked := 0
	err := filepath.WalkDir(root, func(dir string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() || d.Name() == "testdata" {
			return err
		}
		pkg, err := build.ImportDir(dir, 0)
		if _, none := err.(*build.NoGoError); none {
			return nil
		}
		if err != nil {
			return err
		}
		checked++
		// Test files may drive a real sidecar; production code may not.
		for _, imp := range pkg.Imports {
			if strings.HasPrefix(imp, module+"sidecar/") || imp == module+"sidecar" {
				rel, _ := filepath.Rel(testenv.RepoRoot(), dir)
				t.Errorf("%s imports %s: internal/ must not import the sidecar", rel, imp)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 5 {
		t.Fatalf("only %d packages under internal/ checked", checked)
	}
}
