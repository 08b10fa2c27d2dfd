package v1alpha1_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/internal/testing/doctext"
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
