package options

import (
	"io"
	"testing"
)

// The environment is outside input: any value of a duration, size, count or
// boolean variable gives options or an error, and options only with values
// the sidecar can run with.
func FuzzParseEnv(f *testing.F) {
	for _, v := range []string{"1m", "0", "-1s", "5MiB", "2000000TiB", "true", "x", "10000", "", " 1s"} {
		f.Add(v, v, v, v, v)
	}
	f.Fuzz(func(t *testing.T, turnWait, body, traces, noAuth, scope string) {
		env := envMap(map[string]string{
			"ADK2GOOSE_INSECURE_NO_AUTH": "true", "ADK2GOOSE_TURN_WAIT": turnWait, "ADK2GOOSE_MAX_MESSAGE_BODY": body,
			"ADK2GOOSE_DEBUG_TRACES": traces, "ADK2GOOSE_START_GOOSE_ON_CREATE": noAuth, "ADK2GOOSE_WORKSPACE_SCOPE": scope,
		})
		o, err := Parse(nil, env, io.Discard)
		if err != nil {
			return
		}
		if o.TurnWait <= 0 || o.MaxMessageBody <= 0 || o.MaxMessageBody > 1<<40 || o.DebugTraces <= 0 {
			t.Fatalf("options the sidecar cannot run with: turn wait %s, body %d, traces %d", o.TurnWait, o.MaxMessageBody, o.DebugTraces)
		}
	})
}
