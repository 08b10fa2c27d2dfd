package acp

import (
	"testing"

	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/backendtest"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
)

// contractHarness runs the client against the fake goose serve.
var contractHarness = backendtest.Harness{
	Remote: &backendtest.Remote{
		Serve: func(t testing.TB, script goosetest.Script) (string, string, backendtest.Observer) {
			t.Helper()
			srv := goosetest.NewServe(t, goosetest.WithServeScript(script))
			return srv.URL, srv.Secret, backendtest.ServeObserver(srv)
		},
		Connect: func(url, key string) (goose.Backend, error) { return New(Config{URL: url, SecretKey: key}) },
	},
	FinishReason:   "end_turn",
	AgentErrorCode: -32603,
	CanDelete:      true,
}

func TestContract(t *testing.T) { backendtest.Run(t, contractHarness) }

func BenchmarkReply(b *testing.B) { backendtest.BenchmarkReply(b, contractHarness) }
