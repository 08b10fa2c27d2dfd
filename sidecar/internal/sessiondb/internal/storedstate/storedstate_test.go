package storedstate

import (
	"encoding/json"
	"reflect"
	"testing"
)

// A stored state is read back from the data volume, whatever it holds: a
// state or an error, and a state decoded from its own encoding is the
// same.
func FuzzDecodeState(f *testing.F) {
	for _, s := range []string{``, `null`, `{}`, `{"goose:usage:a":{"totalTokens":3}}`, `[1]`, `{"a":1e400}`, `{"a":"\ud800"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			return
		}
		if m == nil {
			t.Fatalf("%q: a nil state", b)
		}
		again, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("%q: a state that does not encode: %v", b, err)
		}
		m2, err := Decode(again)
		if err != nil || !reflect.DeepEqual(m, m2) {
			t.Fatalf("%q: %v read back as %v (%v)", b, m, m2, err)
		}
	})
}
