package render

import (
	"bytes"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// ToYAML renders apply configurations as one multi-document YAML stream, the
// format of the golden files.
func ToYAML(objs []runtime.ApplyConfiguration) ([]byte, error) {
	var buf bytes.Buffer
	for i, o := range objs {
		b, err := yaml.Marshal(o)
		if err != nil {
			return nil, fmt.Errorf("failed to marshal %T: %w", o, err)
		}
		if i > 0 {
			buf.WriteString("---\n")
		}
		buf.Write(b)
	}
	return buf.Bytes(), nil
}
