package confirmation

import (
	"encoding/json"
	"testing"
)

// A client's answer to a confirmation is outside input: any JSON object
// gives a decision or an error, the same each time, and a decision only
// when the object says one ("confirmed", or a lone "response").
func FuzzParseConfirmation(f *testing.F) {
	for _, s := range []string{
		`{"confirmed":true}`, `{"confirmed":"FALSE"}`, `{"response":"{\"confirmed\":true}"}`, `{"response":"Yes."}`,
		`{"response":"maybe"}`, `{"response":"null"}`, `{"response":"{}","extra":1}`, `{"ok":1}`, `{}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var m map[string]any
		if json.Unmarshal([]byte(s), &m) != nil {
			return
		}
		ok, err := Parse(m)
		ok2, err2 := Parse(m)
		if ok != ok2 || (err == nil) != (err2 == nil) {
			t.Fatalf("two readings of %s: %v %v, %v %v", s, ok, err, ok2, err2)
		}
		if err != nil {
			if ok {
				t.Fatalf("%s: approved with an error: %v", s, err)
			}
			return
		}
		_, confirmed := m["confirmed"]
		_, response := m["response"]
		if !confirmed && !(response && len(m) == 1) {
			t.Fatalf("%s: a decision (%v) from an object that states none", s, ok)
		}
	})
}
