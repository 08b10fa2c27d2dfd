package server

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/gooseagent"
)

// TestUsageStoreRecordWithEndedContext: a turn whose context ended records
// no usage; a live one does.
func TestUsageStoreRecordWithEndedContext(t *testing.T) {
	us, err := OpenUsageStore(t.Context(), filepath.Join(t.TempDir(), UsageDBFile))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = us.Close() })
	rec := gooseagent.UsageRecord{
		Key:            gooseagent.SessionKey{AppName: "a", UserID: "u", SessionID: "s"},
		GooseSessionID: "g", Totals: goose.Usage{InputTokens: 3, OutputTokens: 4}, At: time.Now(),
	}
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	if err := us.RecordUsage(ended, rec); !errors.Is(err, context.Canceled) {
		t.Fatalf("RecordUsage with an ended context: %v", err)
	}
	if got, err := us.Totals(t.Context(), "a"); err != nil || got.InputTokens != 0 {
		t.Fatalf("after an ended context: %+v, %v", got, err)
	}
	live, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := us.RecordUsage(live, rec); err != nil {
		t.Fatal(err)
	}
	if got, err := us.Totals(t.Context(), "a"); err != nil || got.InputTokens != 3 || got.OutputTokens != 4 {
		t.Fatalf("after a live context: %+v, %v", got, err)
	}
}
