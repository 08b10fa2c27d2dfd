package server_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/adk2goose/goose-operator/sidecar/goose/acp"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
)

// sseRun posts a /run_sse and calls onData with each data line's JSON until
// the stream ends; onData returning false stops reading.
func sseRun(t *testing.T, base, session, text string, onData func(data []byte) bool) {
	t.Helper()
	j, _ := json.Marshal(runBody("u", session, text, true))
	req, _ := http.NewRequest(http.MethodPost, base+"/run_sse", bytes.NewReader(j))
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("run_sse %s: %v", session, err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("run_sse %s: HTTP %d", session, resp.StatusCode)
		return
	}
	r := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return
		}
		if data, ok := bytes.CutPrefix(line, []byte("data: ")); ok && !onData(data) {
			return
		}
	}
}

// One user's oversized message, or goose's oversized frame in one session,
// ends that session's turn with a clear error event while three other users'
// streams, mid-reply over the same sidecar, complete. goose is the fake
// goose serve with goose's 1024-frame outbound queue.
func TestOneSessionsFaultLeavesOtherStreamsWhole(t *testing.T) {
	script := goosetest.WithBystanders(func(text string) goosetest.Reply {
		if text == "oversized frame" {
			return goosetest.Reply{Steps: []goosetest.Step{{Text: "ok"}, {Text: strings.Repeat("y", 17<<20)}}}
		}
		return goosetest.Echo("", text)
	})
	fake := goosetest.NewServe(t, goosetest.WithServeScript(script), goosetest.WithServeOutboundQueue(goosetest.ServeOutboundCapacity))
	// A low message cap keeps the test's bodies small; the default is
	// goose.DefaultMaxMessageBytes.
	backend, err := acp.New(acp.Config{URL: fake.URL, SecretKey: fake.Secret, MaxMessageBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = backend.Close() })
	sc := startSidecar(t, backend, t.TempDir())

	for name, tc := range map[string]struct{ text, code, detail string }{
		"huge user message":     {strings.Repeat("x", 100<<10), "GOOSE_BAD_REQUEST", "message over the size limit"},
		"oversized goose frame": {"oversized frame", "GOOSE_STREAM_BROKEN", "goose sent a frame over"},
	} {
		t.Run(name, func(t *testing.T) {
			ids := make([]string, 4)
			for i := range ids {
				ids[i] = fmt.Sprintf("iso-%d-%s", i, strings.ReplaceAll(name, " ", "-"))
				if code, body := sc.do(http.MethodPost, "/apps/"+appName+"/users/u/sessions/"+ids[i], nil); code != http.StatusOK {
					t.Fatalf("create session: %d %s", code, body)
				}
			}
			var started, wg sync.WaitGroup
			started.Add(3)
			faulted := make(chan struct{})
			for _, id := range ids[1:] {
				wg.Go(func() {
					var streamed strings.Builder
					first, final := true, false
					sseRun(t, sc.URL, id, "bystander", func(data []byte) bool {
						if bytes.Contains(data, []byte(`"errorCode"`)) {
							t.Errorf("bystander %s: %s", id, data)
							return false
						}
						if !bytes.Contains(data, []byte(`"partial":true`)) {
							final = true
							return true
						}
						var ev struct {
							Content struct{ Parts []struct{ Text string } }
						}
						if err := json.Unmarshal(data, &ev); err != nil || len(ev.Content.Parts) != 1 {
							t.Errorf("bystander %s: partial event %s: %v", id, data, err)
							return false
						}
						streamed.WriteString(ev.Content.Parts[0].Text)
						if first {
							first = false
							started.Done()
							<-faulted // mid-reply while the other session fails
						}
						return true
					})
					if first {
						started.Done()
					}
					if got := streamed.String(); got != goosetest.BystanderText() || !final {
						t.Errorf("bystander %s: streamed %d of %d bytes of its reply, final event %v", id, len(got), len(goosetest.BystanderText()), final)
					}
				})
			}
			started.Wait()
			var errEvent []byte
			sseRun(t, sc.URL, ids[0], tc.text, func(data []byte) bool {
				if bytes.Contains(data, []byte(`"errorCode"`)) {
					errEvent = data
					return false
				}
				return true
			})
			close(faulted)
			wg.Wait()
			var ev struct{ ErrorCode, ErrorMessage string }
			_ = json.Unmarshal(errEvent, &ev)
			if ev.ErrorCode != tc.code || !strings.Contains(ev.ErrorMessage, tc.detail) {
				t.Errorf("faulty session's error event %s; want %s naming %q", errEvent, tc.code, tc.detail)
			}
		})
	}
}
