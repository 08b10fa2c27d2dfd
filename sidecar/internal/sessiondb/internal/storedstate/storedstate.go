// Package storedstate decodes a state column of sessions.db: a JSON object;
// SQL NULL, an empty value and JSON null are an empty state.
package storedstate

import (
	"encoding/json"
	"fmt"
)

// Decode decodes a stored state; NULL or empty is an empty state.
func Decode(b []byte) (map[string]any, error) {
	m := map[string]any{}
	if len(b) == 0 {
		return m, nil
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("failed to decode state: %w", err)
	}
	if m == nil { // the JSON null
		m = map[string]any{}
	}
	return m, nil
}
