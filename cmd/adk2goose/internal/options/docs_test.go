package options

import (
	"flag"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/adk2goose/goose-operator/internal/testing/doctext"
)

// docFlagRow is a row of the docs' flag tables (docs/api.md, docs/using.md):
// | `-name` (`ENV`) | default | what |
// The environment variable is optional here, so that a row without one is
// found and reported.
var docFlagRow = regexp.MustCompile("(?m)^\\| `-([a-z0-9][a-z0-9-]*)`(?: \\(`([A-Z0-9_]+)`\\))? \\| ([^|]*) \\|")

// flagEnv is an environment variable a flag's usage names; its own is
// the last.
var flagEnv = regexp.MustCompile(`env ([A-Z0-9_]+)\)`)

// TestDocsNameEveryFlag keeps the docs' flag tables to adk2goose's
// flags: each has one row naming its environment variable, whose default
// cell starts with the flag's default ("none" for an empty one), and no row
// names a flag the sidecar does not have.
func TestDocsNameEveryFlag(t *testing.T) {
	type row struct{ file, env, def string }
	rows := map[string]row{}
	for _, f := range doctext.Files(t) {
		for _, m := range docFlagRow.FindAllStringSubmatch(f.Text, -1) {
			if r, dup := rows[m[1]]; dup {
				t.Errorf("the docs have two rows for -%s (%s and %s)", m[1], r.file, f.Path)
			}
			rows[m[1]] = row{file: f.Path, env: m[2], def: strings.TrimSpace(m[3])}
		}
	}
	fs, _ := NewFlagSet(&Options{}, func(string) string { return "" })
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
			t.Errorf("the docs have no row for -%s (`-%s` (`%s`) | %s | ...)", f.Name, f.Name, env[1], docDefault(f))
			return
		}
		delete(rows, f.Name)
		if r.env != env[1] {
			t.Errorf("%s names %s for -%s, the flag reads %s", r.file, r.env, f.Name, env[1])
		}
		if want := docDefault(f); !strings.HasPrefix(r.def, want) {
			t.Errorf("%s gives -%s the default %q, want it to start with %q", r.file, f.Name, r.def, want)
		}
	})
	for name := range rows {
		t.Errorf("%s has a row for -%s, which adk2goose does not have", rows[name].file, name)
	}
	if n < 30 {
		t.Errorf("only %d flags visited", n)
	}
}

// docDefault is how the docs write a flag's default: none when it
// is empty, durations in their largest whole unit (10m, not 10m0s).
func docDefault(f *flag.Flag) string {
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

// flagMention is a single-dash flag at the start of inline code: `-name`
// or `-name value` (not a pattern such as `-goose-*`).
var flagMention = regexp.MustCompile("`-([a-z][a-z0-9-]*[a-z0-9])[` ]")

// TestDocsMentionOnlyFlags: a single-dash flag the docs name in inline
// code is one of adk2goose's, so a renamed or removed flag fails until the
// prose follows. docs/development.md is left out: it names the benchmarks'
// flags.
func TestDocsMentionOnlyFlags(t *testing.T) {
	fs, _ := NewFlagSet(&Options{}, func(string) string { return "" })
	n := 0
	for _, f := range doctext.Files(t) {
		if f.Path == "docs/development.md" {
			continue
		}
		for _, m := range flagMention.FindAllStringSubmatch(f.Text, -1) {
			n++
			if fs.Lookup(m[1]) == nil {
				t.Errorf("%s names -%s, which adk2goose does not have", f.Path, m[1])
			}
		}
	}
	if n < 30 {
		t.Errorf("only %d flags named in the docs", n)
	}
}
