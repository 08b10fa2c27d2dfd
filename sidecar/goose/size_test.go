package goose

import (
	"errors"
	"strings"
	"testing"
)

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
