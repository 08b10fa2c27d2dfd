package main

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// readmeFlagRow is a row of the README's flag tables:
// | `-name` (`ENV`) | default | what |
// The environment variable is optional here, so that a row without one is
// found and reported.
var readmeFlagRow = regexp.MustCompile("(?m)^\\| `-([a-z0-9-]+)`(?: \\(`([A-Z0-9_]+)`\\))? \\| ([^|]*) \\|")

// flagEnv is an environment variable a flag's usage names; its own is
// the last.
var flagEnv = regexp.MustCompile(`env ([A-Z0-9_]+)\)`)

// TestREADMENamesEveryFlag keeps the README's flag tables to adk2goose's
// flags: each has one row naming its environment variable, whose default
// cell starts with the flag's default ("none" for an empty one), and no row
// names a flag the sidecar does not have.
func TestREADMENamesEveryFlag(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	type row struct{ env, def string }
	rows := map[string]row{}
	for _, m := range readmeFlagRow.FindAllStringSubmatch(string(b), -1) {
		if _, dup := rows[m[1]]; dup {
			t.Errorf("the README has two rows for -%s", m[1])
		}
		rows[m[1]] = row{env: m[2], def: strings.TrimSpace(m[3])}
	}
	fs, _ := newFlagSet(&options{}, func(string) string { return "" })
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		n++
		envs := flagEnv.FindAllStringSubmatch(f.Usage, -1)
		if envs == nil {
			t.Errorf("-%s names no environment variable in its usage: %q", f.Name, f.Usage)
			return
		}
		env := envs[len(envs)-1] // the flag's own comes last
		r, ok := rows[f.Name]
		if !ok {
			t.Errorf("the README has no row for -%s (`-%s` (`%s`) | %s | ...)", f.Name, f.Name, env[1], readmeDefault(f))
			return
		}
		delete(rows, f.Name)
		if r.env != env[1] {
			t.Errorf("the README names %s for -%s, the flag reads %s", r.env, f.Name, env[1])
		}
		if want := readmeDefault(f); !strings.HasPrefix(r.def, want) {
			t.Errorf("the README's default of -%s is %q, want it to start with %q", f.Name, r.def, want)
		}
	})
	for name := range rows {
		t.Errorf("the README has a row for -%s, which adk2goose does not have", name)
	}
	if n < 30 {
		t.Errorf("only %d flags visited", n)
	}
}

// readmeDefault is how the README writes a flag's default: none when it
// is empty, durations in their largest whole unit (10m, not 10m0s).
func readmeDefault(f *flag.Flag) string {
	if f.DefValue == "" {
		return "none"
	}
	if g, ok := f.Value.(flag.Getter); ok {
		if d, ok := g.Get().(time.Duration); ok {
			switch {
			case d == 0:
				return "`0`"
			case d%time.Hour == 0:
				return "`" + strconv.FormatInt(int64(d/time.Hour), 10) + "h`"
			case d%time.Minute == 0:
				return "`" + strconv.FormatInt(int64(d/time.Minute), 10) + "m`"
			}
		}
	}
	return "`" + f.DefValue + "`"
}
