package goose

import (
	"fmt"
	"unicode/utf8"
)

// CheckMessageSize returns an error wrapping ErrMessageTooLarge when text,
// encoded as a JSON string the way encoding/json writes it (quotes, escapes,
// HTML-safe escapes and U+FFFD for invalid UTF-8 included), is over limit
// bytes. limit <= 0 selects DefaultMaxMessageBytes. It does not allocate.
func CheckMessageSize(text string, limit int) error {
	if limit <= 0 {
		limit = DefaultMaxMessageBytes
	}
	// No character encodes to more than 6 bytes: most texts need no count.
	if 2+6*len(text) <= limit {
		return nil
	}
	if n := jsonStringLen(text); n > limit {
		return fmt.Errorf("failed to send message: %w: %d bytes encoded, the limit is %d", ErrMessageTooLarge, n, limit)
	}
	return nil
}

// jsonStringLen is len(json.Marshal(s)) without building it.
func jsonStringLen(s string) int {
	n := 2 // quotes
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			switch {
			// encoding/json has short escapes for these (\b and \f since Go 1.22).
			case b == '"' || b == '\\' || b == '\n' || b == '\r' || b == '\t' || b == '\b' || b == '\f':
				n += 2
			case b < 0x20 || b == '<' || b == '>' || b == '&':
				n += 6
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			n += 6 // \ufffd
		case r == '\u2028' || r == '\u2029':
			n += 6
		default:
			n += size
		}
		i += size
	}
	return n
}
