package goose

import (
	"encoding/json"
	"fmt"
)

// CheckMessageSize returns an error wrapping ErrMessageTooLarge when text,
// encoded as a JSON string the way both backends send it, is over limit
// bytes. limit <= 0 selects DefaultMaxMessageBytes.
func CheckMessageSize(text string, limit int) error {
	if limit <= 0 {
		limit = DefaultMaxMessageBytes
	}
	b, err := json.Marshal(text)
	if err != nil {
		return fmt.Errorf("failed to encode message: %w", err)
	}
	if len(b) > limit {
		return fmt.Errorf("failed to send message: %w: %d bytes encoded, the limit is %d", ErrMessageTooLarge, len(b), limit)
	}
	return nil
}
