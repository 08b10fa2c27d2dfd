// Package docs_test keeps the documentation's links and commands true: a
// relative link resolves to a file of the repository (and its #anchor to a
// heading of that page), and every `make` target the docs name exists.
package docs_test

import (
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/adk2goose/goose-operator/internal/testing/doctext"
)

var (
	// link is a Markdown link's target: [text](target).
	link = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// heading is a Markdown heading's text.
	heading = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
	// fence opens or closes a code block.
	fence = regexp.MustCompile("(?m)^```")
	// inlineCode is a code span, where a ]( is not a link (a regular
	// expression in the generated reference, say).
	inlineCode = regexp.MustCompile("`[^`\n]*`")
	// makeCommand is a make command in inline code or at the start of a
	// line of a code block: its arguments up to the code's end, a comment
	// or the line's end.
	makeCommand = regexp.MustCompile("(?m)(?:`|^)make ([^`#\n]+)")
	// helpTarget is a target in `make help`'s output.
	helpTarget = regexp.MustCompile(`(?m)^\s+(?:\x1b\[[0-9;]*m)?([a-zA-Z0-9_-]+)`)
	// ansi is a terminal colour code.
	ansi = regexp.MustCompile(`\x1b\[[0-9;]*m`)
	// targetName is what a make target's name may be.
	targetName = regexp.MustCompile(`^[a-z0-9-]+$`)
)

// outsideCodeBlocks is text outside fenced code blocks.
func outsideCodeBlocks(text string) string {
	parts := fence.Split(text, -1)
	var b strings.Builder
	for i := 0; i < len(parts); i += 2 {
		b.WriteString(parts[i])
	}
	return b.String()
}

// prose is text outside code blocks and code spans, where links are links.
func prose(text string) string {
	return inlineCode.ReplaceAllString(outsideCodeBlocks(text), "``")
}

// anchor is GitHub's anchor for a heading: lower case, punctuation but
// hyphens and underscores dropped, spaces as hyphens.
func anchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors are the anchors of a page's headings.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	for _, m := range heading.FindAllStringSubmatch(outsideCodeBlocks(text), -1) {
		out[anchor(m[1])] = true
	}
	return out
}

// TestLinksResolve: every relative link of README.md and docs/ names a file
// or directory of the repository, and a #fragment a heading of that page.
func TestLinksResolve(t *testing.T) {
	root := doctext.Root(t)
	pages := map[string]string{}
	for _, f := range doctext.Files(t) {
		pages[f.Path] = f.Text
	}
	n := 0
	for _, f := range doctext.Files(t) {
		for _, m := range link.FindAllStringSubmatch(prose(f.Text), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			n++
			file, frag, _ := strings.Cut(target, "#")
			p := f.Path
			if file != "" {
				p = path.Join(path.Dir(f.Path), file)
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(p))); err != nil {
					t.Errorf("%s links to %s, which does not exist", f.Path, target)
					continue
				}
			}
			if frag == "" {
				continue
			}
			text, ok := pages[p]
			if !ok {
				t.Errorf("%s links to %s: an anchor in a file that is not a doc page", f.Path, target)
				continue
			}
			if !anchors(text)[frag] {
				t.Errorf("%s links to %s, but %s has no heading #%s", f.Path, target, p, frag)
			}
		}
	}
	if n < 20 {
		t.Errorf("only %d relative links found", n)
	}
}

// TestMakeTargetsExist: every target a `make` command in the docs names is
// one `make help` lists (VAR=value arguments aside).
func TestMakeTargetsExist(t *testing.T) {
	root := doctext.Root(t)
	cmd := exec.Command("make", "--no-print-directory", "help")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("failed to run make help: %v", err)
	}
	targets := map[string]bool{}
	for _, m := range helpTarget.FindAllStringSubmatch(ansi.ReplaceAllString(string(out), ""), -1) {
		targets[m[1]] = true
	}
	if len(targets) < 10 {
		t.Fatalf("only %d targets in make help:\n%s", len(targets), out)
	}
	n := 0
	for _, f := range doctext.Files(t) {
		for _, m := range makeCommand.FindAllStringSubmatch(f.Text, -1) {
			for _, arg := range strings.Fields(m[1]) {
				if strings.Contains(arg, "=") || strings.HasPrefix(arg, "-") {
					continue
				}
				if !targetName.MatchString(arg) {
					break // prose after the command
				}
				n++
				if !targets[arg] {
					t.Errorf("%s names `make %s`, which make help does not list", f.Path, arg)
				}
			}
		}
	}
	if n < 10 {
		t.Errorf("only %d make targets named in the docs", n)
	}
}

// TestPagesSayWhoTheyAreFor: under its title, every page of docs/ says in
// one italic line who it is for ("*For ...").
func TestPagesSayWhoTheyAreFor(t *testing.T) {
	for _, f := range doctext.Files(t) {
		if !strings.HasPrefix(f.Path, "docs/") {
			continue
		}
		title, rest, _ := strings.Cut(f.Text, "\n")
		if !strings.HasPrefix(title, "# ") {
			t.Errorf("%s does not start with a title", f.Path)
			continue
		}
		if !strings.HasPrefix(strings.TrimLeft(rest, "\n"), "*For ") {
			t.Errorf("%s: the line under the title does not say who the page is for (*For ...*)", f.Path)
		}
	}
}
