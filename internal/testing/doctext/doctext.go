// Package doctext reads the project's documentation (README.md and every
// page under docs/) for the tests that keep it true to the code.
package doctext

import (
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// File is one documentation file: its path from the repository root
// (slash-separated) and its text.
type File struct {
	Path, Text string
}

// Root is the repository root.
func Root(t testing.TB) string {
	t.Helper()
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("failed to locate the doctext package's source")
	}
	return filepath.Join(filepath.Dir(self), "..", "..", "..")
}

// Files returns README.md and every Markdown file under docs/, README.md
// first and the rest in lexical order.
func Files(t testing.TB) []File {
	t.Helper()
	root := Root(t)
	paths := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			paths = append(paths, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("failed to list docs: %v", err)
	}
	files := make([]File, 0, len(paths))
	for _, p := range paths {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(p)))
		if err != nil {
			t.Fatalf("failed to read %s: %v", p, err)
		}
		files = append(files, File{Path: p, Text: string(b)})
	}
	return files
}

// Read returns the text of one documentation file, by its path from the
// repository root.
func Read(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(Root(t), filepath.FromSlash(path)))
	if err != nil {
		t.Fatalf("failed to read %s: %v", path, err)
	}
	return string(b)
}

// Section returns the "## title" section of the file at path, up to the
// next "## " heading.
func Section(t testing.TB, path, title string) string {
	t.Helper()
	_, section, ok := strings.Cut(Read(t, path), "\n## "+title+"\n")
	if !ok {
		t.Fatalf("%s has no %q section", path, "## "+title)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	return section
}
