// Package secretfile reads a secret that is mounted or saved as a file, as
// Kubernetes Secret volumes and `--token-file` flags provide them.
package secretfile

import (
	"fmt"
	"os"
	"strings"
)

// Read returns the file's content without surrounding whitespace (an editor's
// or `echo`'s trailing newline is not part of a token). An empty file is an
// error: a blank secret would silently disable what it guards. what names
// the secret in errors.
func Read(path, what string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("failed to read %s: %w", what, err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("failed to read %s: %s is empty", what, path)
	}
	return s, nil
}
