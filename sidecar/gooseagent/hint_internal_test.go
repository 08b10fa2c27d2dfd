package gooseagent

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/adk2goose/goose-operator/sidecar/goose"
)

func TestConfirmationHintWording(t *testing.T) {
	long := strings.Repeat("é", maxHintValue+5)
	for _, tc := range []struct {
		name string
		ar   goose.ApprovalRequest
		want string
	}{
		{"extension tool", goose.ApprovalRequest{ToolName: "developer__shell", Arguments: json.RawMessage(`{"command":"rm x"}`)},
			"goose wants to use shell (developer extension):\n  command: rm x\nReply yes to allow it this once, or no to refuse."},
		{"goose's prompt first, arguments sorted, JSON for non-strings", goose.ApprovalRequest{ToolName: "editor__write", Prompt: "Write the file?",
			Arguments: json.RawMessage(`{"path":"/a","lines":[1,2],"force":true}`)},
			"Write the file?\ngoose wants to use write (editor extension):\n  force: true\n  lines: [1,2]\n  path: /a\nReply yes to allow it this once, or no to refuse."},
		{"prompt equal to the tool name is not repeated; no arguments", goose.ApprovalRequest{ToolName: "fetch", Prompt: "fetch"},
			"goose wants to use fetch\nReply yes to allow it this once, or no to refuse."},
		{"long values cut", goose.ApprovalRequest{ToolName: "x__y", Arguments: json.RawMessage(`{"v":"` + long + `"}`)},
			"goose wants to use y (x extension):\n  v: " + strings.Repeat("é", maxHintValue) + "…\nReply yes to allow it this once, or no to refuse."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := confirmationHint(&tc.ar, argsMap(tc.ar.Arguments)); got != tc.want {
				t.Errorf("hint\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}
