package goose

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func FuzzJSONStringLen(f *testing.F) {
	for _, s := range []string{"", "plain", "quote\" back\\ nl\n tab\t ctl\x01 bs\b ff\f", "<a&b>", "\u2028\u2029", "bad \xff utf8", "日本語"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := jsonStringLen(s); got != len(b) {
			t.Fatalf("jsonStringLen(%q) = %d, json.Marshal gives %d", s, got, len(b))
		}
	})
}

func TestCheckMessageSize(t *testing.T) {
	if err := CheckMessageSize(strings.Repeat("a", 100), 102); err != nil {
		t.Errorf("100 plain bytes in a 102-byte limit: %v", err)
	}
	// 60 '<' encode to 360 bytes: over a 300-byte limit though 60 < 300.
	err := CheckMessageSize(strings.Repeat("<", 60), 300)
	if !errors.Is(err, ErrMessageTooLarge) || !strings.Contains(err.Error(), "362 bytes") {
		t.Errorf("escaped text over the limit: %v", err)
	}
	if err := CheckMessageSize(strings.Repeat("a", DefaultMaxMessageBytes), 0); !errors.Is(err, ErrMessageTooLarge) {
		t.Errorf("default limit: %v", err)
	}
}
