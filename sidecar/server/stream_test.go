package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
)

// partialTexts reads a /run_sse of text on session and returns the text of
// each partial event, until stop says so, the stream ends, or a minute
// passed (then the test fails).
func partialTexts(t *testing.T, base, session, text string, stop func(texts []string) bool) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	j, _ := json.Marshal(runBody("u", session, text, true))
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/run_sse", bytes.NewReader(j))
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("run_sse: %v", err)
	}
	defer resp.Body.Close()
	var texts []string
	r := bufio.NewReader(resp.Body)
	for !stop(texts) {
		line, err := r.ReadBytes('\n')
		if err != nil {
			if ctx.Err() != nil {
				t.Fatalf("partial events received before the deadline: %q", texts)
			}
			return texts
		}
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue
		}
		var ev struct {
			Partial bool `json:"partial"`
			Content struct {
				Parts []struct {
					Text string `json:"text"`
				} `json:"parts"`
			} `json:"content"`
		}
		if err := json.Unmarshal(data, &ev); err != nil {
			t.Fatalf("event %s: %v", data, err)
		}
		if ev.Partial && len(ev.Content.Parts) > 0 {
			texts = append(texts, ev.Content.Parts[0].Text)
		}
	}
	return texts
}

// No event waits for more: while goose works on after three quick deltas,
// the client has all three.
func TestEventsGoOutBeforeGooseWaits(t *testing.T) {
	for _, f := range flavours {
		t.Run(f.name, func(t *testing.T) {
			b := f.start(t, goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{
				{Text: "a"}, {Text: "b"}, {Text: "c"},
				{Delay: 10 * time.Minute, Text: "d"}, // goose works on until the client leaves
			}}))
			sc := startSidecar(t, b, t.TempDir())
			sc.createSession("u", "s1")
			got := partialTexts(t, sc.URL, "s1", "go", func(texts []string) bool { return strings.Join(texts, "") == "abc" })
			if len(got) == 0 || len(got) > 3 {
				t.Fatalf("partial events %q, want a, b, c in one to three", got)
			}
		})
	}
}

// burstBackend yields each reply of its backend only once goose finished
// it, all events back to back: the events of a reply reach the sidecar
// together, as they do when the sidecar falls behind goose.
type burstBackend struct{ goose.Backend }

func (b burstBackend) Reply(ctx context.Context, sessionID string, msg goose.UserMessage) iter.Seq2[goose.Event, error] {
	return func(yield func(goose.Event, error) bool) {
		var evs []goose.Event
		for ev, err := range b.Backend.Reply(ctx, sessionID, msg) {
			if err != nil {
				yield(nil, err)
				return
			}
			evs = append(evs, ev)
		}
		for _, ev := range evs {
			if !yield(ev, nil) {
				return
			}
		}
	}
}

// Events that reach the sidecar together all reach the client, in order.
func TestEventsThatArriveTogetherAllArrive(t *testing.T) {
	const deltas = 200
	b := flavours[1].start(t, goosetest.Fixed(goosetest.Deltas(deltas, "t")))
	sc := startSidecar(t, burstBackend{b}, t.TempDir())
	sc.createSession("u", "s1")
	got := partialTexts(t, sc.URL, "s1", "go", func([]string) bool { return false })
	if len(got) != deltas {
		t.Fatalf("%d of %d partial events", len(got), deltas)
	}
	for i, text := range got {
		if text != fmt.Sprintf("t%d ", i) {
			t.Fatalf("partial event %d = %q: lost or reordered", i, text)
		}
	}
}
