package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDefaultGooseImageIsNamedOnce keeps every copy of the default goose
// image equal to DefaultGooseImage, the one place that decides it.
func TestDefaultGooseImageIsNamedOnce(t *testing.T) {
	root := filepath.Join("..", "..")
	for file, want := range map[string]string{
		"config/manager/manager.yaml":       "- --goose-image=" + DefaultGooseImage + "\n",
		"charts/goose-operator/values.yaml": "gooseImage: " + DefaultGooseImage + "\n",
		"docs/operations.md":                "`--goose-image` (default `" + DefaultGooseImage + "`)",
		"dist/install.yaml":                 "- --goose-image=" + DefaultGooseImage + "\n",
	} {
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), want) {
			t.Errorf("%s does not name the default goose image %s (want %q)", file, DefaultGooseImage, want)
		}
	}
}
