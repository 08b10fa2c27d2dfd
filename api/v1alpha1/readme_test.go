package v1alpha1_test

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
)

// specFieldCell is the first cell of a row of the README's GooseAgent
// table; specFieldName a field it names (`name`, `name.sub`, `name[]`).
var (
	specFieldCell = regexp.MustCompile("(?m)^\\| (`[^|]*) \\|")
	specFieldName = regexp.MustCompile("`([A-Za-z]+)[^`]*`")
)

// TestREADMEDescribesEverySpecField keeps the README's table of a
// GooseAgent's fields to the spec: every field of GooseAgentSpec has a row,
// and every row names a field.
func TestREADMEDescribesEverySpecField(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## A GooseAgent\n")
	if !ok {
		t.Fatal(`the README has no "## A GooseAgent" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
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
			t.Errorf("the README's GooseAgent table has no row for spec.%s", name)
		}
		delete(named, name)
	}
	for name := range named {
		t.Errorf("the README's GooseAgent table has a row for %s, which is no field of the spec", name)
	}
	if fields < 10 {
		t.Errorf("only %d spec fields found", fields)
	}
}
