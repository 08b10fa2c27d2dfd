package v1alpha1_test

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/internal/testing/doctext"
	"github.com/adk2goose/goose-operator/internal/testing/testenv"
)

// docPage holds the tables these tests keep to the API.
const docPage = "docs/api.md"

var (
	// specFieldCell is the first cell of a row of the API reference's GooseAgent
	// table; specFieldName a field it names (`name`, `name.sub`, `name[]`).
	specFieldCell = regexp.MustCompile("(?m)^\\| (`[^|]*) \\|")
	specFieldName = regexp.MustCompile("`([A-Za-z]+)[^`]*`")
	// conditionRow is a row of the API reference's table of conditions,
	// | `Type` | `True`: `Reason` (...), ... |, and conditionWord a status
	// or reason it names.
	conditionRow  = regexp.MustCompile("(?m)^\\| `([A-Za-z]+)` \\| (.*) \\|$")
	conditionWord = regexp.MustCompile("`([A-Za-z]+)`")
)

// TestDocsDescribeEverySpecField keeps the API reference's table of a
// GooseAgent's fields to the spec: every field of GooseAgentSpec has a row,
// and every row names a field.
func TestDocsDescribeEverySpecField(t *testing.T) {
	section := doctext.Section(t, docPage, "The GooseAgent")
	named := map[string]bool{}
	for _, cell := range specFieldCell.FindAllStringSubmatch(section, -1) {
		for _, name := range specFieldName.FindAllStringSubmatch(cell[1], -1) {
			named[name[1]] = true
		}
	}
	spec := reflect.TypeFor[agentsv1alpha1.GooseAgentSpec]()
	fields := 0
	for f := range spec.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		fields++
		if !named[name] {
			t.Errorf("the API reference's GooseAgent table has no row for spec.%s", name)
		}
		delete(named, name)
	}
	for name := range named {
		t.Errorf("the API reference's GooseAgent table has a row for %s, which is no field of the spec", name)
	}
	if fields < 10 {
		t.Errorf("only %d spec fields found", fields)
	}
}

// TestDocsNameEveryCondition keeps the API reference's table of conditions to
// the API's fixed condition types and reasons (the Condition* and Reason*
// constants of gooseagent_types.go): each type has a row, each reason is in
// one, and the table names no other.
func TestDocsNameEveryCondition(t *testing.T) {
	consts := constantsOf(t, "gooseagent_types.go")
	rows := map[string]string{}
	for _, m := range conditionRow.FindAllStringSubmatch(doctext.Section(t, docPage, "Conditions"), -1) {
		rows[m[1]] = m[2]
	}
	conditions, reasons := map[string]bool{}, map[string]bool{}
	for name, value := range consts {
		switch {
		case strings.HasPrefix(name, "Condition"):
			conditions[value] = true
			if _, ok := rows[value]; !ok {
				t.Errorf("the API reference's conditions table has no row for %s", value)
			}
		case strings.HasPrefix(name, "Reason"):
			reasons[value] = true
		}
	}
	if len(conditions) < 3 || len(reasons) < 10 {
		t.Fatalf("only %d conditions and %d reasons found", len(conditions), len(reasons))
	}
	named := map[string]bool{}
	for cond, cell := range rows {
		if !conditions[cond] {
			t.Errorf("the API reference's conditions table has a row for %s, which is no condition type", cond)
		}
		for _, m := range conditionWord.FindAllStringSubmatch(cell, -1) {
			switch w := m[1]; {
			case w == "True" || w == "False" || w == "Unknown":
			case reasons[w]:
				named[w] = true
			default:
				t.Errorf("the API reference names %s for %s, which is no reason", w, cond)
			}
		}
	}
	for r := range reasons {
		if !named[r] {
			t.Errorf("the API reference's conditions table does not name the reason %s", r)
		}
	}
}

// constantsOf returns the string constants declared in file, by name.
func constantsOf(t *testing.T, file string) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if v, err := strconv.Unquote(lit.Value); err == nil {
						out[name.Name] = v
					}
				}
			}
		}
	}
	return out
}

// reasonInProse is a condition reason the docs name outside the conditions
// table, as in "reason `StatsStale`".
var reasonInProse = regexp.MustCompile("reasons? `([A-Za-z]+)`")

// TestDocsNameOnlyReasons: a reason named anywhere in the docs ("reason
// `X`") is one of the API's, so renaming a reason fails until every page
// that tells users to look for it follows.
func TestDocsNameOnlyReasons(t *testing.T) {
	reasons := map[string]bool{}
	for name, value := range constantsOf(t, "gooseagent_types.go") {
		if strings.HasPrefix(name, "Reason") {
			reasons[value] = true
		}
	}
	n := 0
	for _, f := range doctext.Files(t) {
		for _, m := range reasonInProse.FindAllStringSubmatch(f.Text, -1) {
			n++
			if !reasons[m[1]] {
				t.Errorf("%s names the reason %s, which the API does not have", f.Path, m[1])
			}
		}
	}
	if n < 5 {
		t.Errorf("only %d reasons named in the docs' prose", n)
	}
}

// yamlBlock is a fenced ```yaml block of a doc.
var yamlBlock = regexp.MustCompile("(?ms)^```yaml\n(.*?)^```")

// TestDocsGooseAgentsAreAccepted: every GooseAgent of a ```yaml block in the
// docs is accepted by the API server (a server-side dry-run create: the
// CRD's schema, defaults and CEL rules) and matches the Go types strictly.
// A block that is part of a spec (it starts with `spec:`, or with spec
// fields, indented as under spec) is completed with a minimal provider
// first; a block that is no GooseAgent (Helm values, say) is skipped.
func TestDocsGooseAgentsAreAccepted(t *testing.T) {
	ns := newNamespace(t)
	env := testenv.Shared(t)
	specFields := map[string]bool{}
	for f := range reflect.TypeFor[agentsv1alpha1.GooseAgentSpec]().Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		specFields[name] = true
	}
	checked := 0
	for _, f := range doctext.Files(t) {
		for i, m := range yamlBlock.FindAllStringSubmatch(f.Text, -1) {
			doc, ok := gooseAgentOf(t, m[1], specFields)
			if !ok {
				continue
			}
			checked++
			t.Run(fmt.Sprintf("%s#%d", f.Path, i+1), func(t *testing.T) {
				raw, err := yaml.Marshal(doc)
				if err != nil {
					t.Fatal(err)
				}
				var ga agentsv1alpha1.GooseAgent
				if err := yaml.UnmarshalStrict(raw, &ga); err != nil {
					t.Fatalf("%s: the example does not match the Go types: %v\n%s", f.Path, err, m[1])
				}
				ga.Namespace = ns
				if err := env.Client.Create(context.Background(), &ga, client.DryRunAll); err != nil {
					t.Fatalf("%s: the API server rejects the example: %v\n%s", f.Path, err, m[1])
				}
			})
		}
	}
	if checked < 5 {
		t.Errorf("only %d GooseAgent examples found in the docs", checked)
	}
}

// gooseAgentOf reads a yaml block as a GooseAgent: a whole one, a `spec:`
// fragment, or spec fields alone. ok is false for yaml that is none of them.
func gooseAgentOf(t *testing.T, block string, specFields map[string]bool) (map[string]any, bool) {
	t.Helper()
	var top map[string]any
	if err := yaml.Unmarshal([]byte(dedent(block)), &top); err != nil || len(top) == 0 {
		return nil, false
	}
	if top["kind"] == "GooseAgent" {
		return top, true
	}
	spec, ok := top["spec"].(map[string]any)
	if !ok || len(top) != 1 {
		for k := range top {
			if !specFields[k] {
				return nil, false
			}
		}
		spec = top
	}
	full := map[string]any{"provider": map[string]any{"name": "ollama", "model": "qwen3:8b"}}
	maps.Copy(full, spec)
	return map[string]any{
		"apiVersion": agentsv1alpha1.GroupVersion.String(),
		"kind":       "GooseAgent",
		"metadata":   map[string]any{"name": "doc-example"},
		"spec":       full,
	}, true
}

// dedent removes the indentation the block's first line has from every line.
func dedent(block string) string {
	first, _, _ := strings.Cut(block, "\n")
	indent := first[:len(first)-len(strings.TrimLeft(first, " "))]
	if indent == "" {
		return block
	}
	lines := strings.Split(block, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, indent)
	}
	return strings.Join(lines, "\n")
}
