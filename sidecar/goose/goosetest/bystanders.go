package goosetest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/adk2goose/goose-operator/sidecar/goose"
)

// BystanderDeltas is how many text deltas a bystander's reply has.
const BystanderDeltas = 200

// bystanderText is the user text bystander replies send.
const bystanderText = "bystander"

// WithBystanders is a Script for fault-isolation tests: it answers the
// bystanders RunBystanders starts with BystanderDeltas deltas, and every
// other message with faulty.
func WithBystanders(faulty func(text string) Reply) Script {
	return func(_, text string) Reply {
		if text == bystanderText {
			return Deltas(BystanderDeltas, "b")
		}
		return faulty(text)
	}
}

// BystanderText is the whole text of a bystander's reply: what its
// partial events carry between them, however they are split.
func BystanderText() string {
	var b strings.Builder
	for _, step := range Deltas(BystanderDeltas, "b").Steps {
		b.WriteString(step.Text)
	}
	return b.String()
}

// PacedDeltas is a reply of n text deltas spread evenly over d (the first
// at once; d 0: as fast as goose can) and one usage step: a model's answer,
// as the load tools and benchmarks stream it.
func PacedDeltas(n int, d time.Duration) Reply {
	gap := d / time.Duration(max(n-1, 1))
	steps := make([]Step, 0, n+1)
	for i := range n {
		step := Step{Text: fmt.Sprintf(pacedDeltaPrefix+"%03d ", i)}
		if i > 0 {
			step.Delay = gap
		}
		steps = append(steps, step)
	}
	return Reply{Steps: append(steps, Step{Usage: &UsageStep{Input: 10, Output: int64(n)}})}
}

// pacedDeltaPrefix starts each PacedDeltas delta.
const pacedDeltaPrefix = "token"

// PacedDeltasIn is how many deltas a partial event carries (data may be
// the event's JSON): one, or as many PacedDeltas deltas as reached the
// sidecar together. An event with other text counts as one.
func PacedDeltasIn(data []byte) int { return max(1, bytes.Count(data, []byte(pacedDeltaPrefix))) }

// Deltas is a reply of n text deltas "prefix0 ", "prefix1 ", ... and one
// usage step.
func Deltas(n int, prefix string) Reply {
	steps := make([]Step, 0, n+1)
	for i := range n {
		steps = append(steps, Step{Text: fmt.Sprintf("%s%d ", prefix, i)})
	}
	return Reply{Steps: append(steps, Step{Usage: &UsageStep{Input: 1, Output: int64(n)}})}
}

// RunBystanders checks that a fault in one session leaves the others whole.
// It starts three replies on new sessions of b (the fake must answer them
// through WithBystanders), calls fault once each has read its first event,
// while each is still mid-reply (its reader waits for fault to return), and
// then requires every one to complete with all its deltas in order.
func RunBystanders(t testing.TB, b goose.Backend, fault func()) {
	t.Helper()
	const n = 3
	ids := make([]string, n)
	for i := range ids {
		s, err := b.StartSession(context.Background(), goose.StartOptions{WorkingDir: os.TempDir()}) // exists: goose checks (server.rs validate_absolute_cwd)
		if err != nil {
			t.Fatalf("failed to start a bystander session: %v", err)
		}
		ids[i] = s.ID
	}
	var want strings.Builder
	for j := range BystanderDeltas {
		fmt.Fprintf(&want, "b%d ", j)
	}
	var started, wg sync.WaitGroup
	started.Add(n)
	faulted := make(chan struct{})
	errs := make([]error, n)
	for i, id := range ids {
		wg.Go(func() {
			first, finished := true, false
			var text strings.Builder
			for ev, err := range b.Reply(context.Background(), id, goose.UserMessage{Text: bystanderText}) {
				if err != nil {
					errs[i] = err
					break
				}
				if first {
					first = false
					started.Done()
					<-faulted
				}
				switch ev := ev.(type) {
				case *goose.TextDelta:
					text.WriteString(ev.Text)
				case *goose.Finish:
					finished = true
				}
			}
			if first {
				started.Done()
			}
			if errs[i] == nil && (!finished || text.String() != want.String()) {
				errs[i] = fmt.Errorf("finished=%v, %d bytes of text, want %d", finished, text.Len(), want.Len())
			}
		})
	}
	started.Wait()
	fault()
	close(faulted)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("bystander session %d: %v", i, err)
		}
	}
}
