// Package confirmation reads the user's decision from an answer to a goose
// tool confirmation: the function response to an adk_request_confirmation
// call.
package confirmation

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ErrInvalid is wrapped by the errors of Parse: the response states no
// decision.
var ErrInvalid = errors.New("invalid tool confirmation response")

// Parse reads the user's decision from a confirmation function response. It
// accepts what adk-go accepts, {"confirmed": bool, ...} and the web UI's
// {"response": "<ToolConfirmation JSON>"}, and, because the v1.7.0 web UI
// only offers a free text box for long-running calls, a bare yes/no word in
// "response". Anything else is an error: an approval is never guessed.
func Parse(resp map[string]any) (bool, error) {
	if s, ok := resp["response"].(string); ok && len(resp) == 1 {
		var m map[string]any
		if json.Unmarshal([]byte(s), &m) == nil && m != nil {
			return confirmedValue(m)
		}
		switch strings.ToLower(strings.Trim(strings.TrimSpace(s), ".!")) {
		case "yes", "y", "true", "approve", "approved", "allow", "ok", "confirm", "confirmed":
			return true, nil
		case "no", "n", "false", "deny", "denied", "reject", "rejected", "decline":
			return false, nil
		}
		return false, fmt.Errorf("%w: response %q is neither a ToolConfirmation JSON object nor yes/no", ErrInvalid, s)
	}
	return confirmedValue(resp)
}

func confirmedValue(m map[string]any) (bool, error) {
	switch v := m["confirmed"].(type) {
	case bool:
		return v, nil
	case string:
		switch strings.ToLower(v) {
		case "true":
			return true, nil
		case "false":
			return false, nil
		}
	}
	return false, fmt.Errorf(`%w: want {"confirmed": true|false}`, ErrInvalid)
}
