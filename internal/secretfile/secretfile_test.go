package secretfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if got, err := Read(write("token", "  s3cret\n"), "auth token"); err != nil || got != "s3cret" {
		t.Fatalf("Read = %q, %v; want s3cret", got, err)
	}
	for name, path := range map[string]string{
		"empty":     write("empty", ""),
		"blank":     write("blank", " \n\t\n"),
		"missing":   filepath.Join(dir, "missing"),
		"directory": dir,
	} {
		if _, err := Read(path, "auth token"); err == nil || !strings.Contains(err.Error(), "failed to read auth token") {
			t.Errorf("%s: error %v, want one naming the auth token", name, err)
		}
	}
}
