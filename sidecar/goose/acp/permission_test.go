package acp

import (
	"testing"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/adk2goose/goose-operator/sidecar/goose"
)

// TestDecisionBeforeTheReplyEndsWins: a denial followed at once by the
// reply's end (a drain or a confirmation timeout denies, then cancels)
// reaches goose as the denial, not as "cancelled", however the permission
// request's answer is scheduled. Both are ready when it runs, and select
// alone picks at random: 200 rounds make a lucky pass out of the question.
func TestDecisionBeforeTheReplyEndsWins(t *testing.T) {
	req := permissionRequest(t, `{"sessionId":"s1","toolCall":{"toolCallId":"call-1","title":"rm -rf x"},`+
		`"options":[{"optionId":"allow","name":"Allow","kind":"allow_once"},{"optionId":"reject","name":"Reject","kind":"reject_once"}]}`)
	cn := &conn{}
	c := &Client{replies: map[string]*reply{}}
	for i := range 200 {
		r := newReply("s1", cn)
		c.replies["s1"] = r
		answer := c.acceptPermission(cn, req)
		if err := c.Approve(t.Context(), "s1", "call-1", goose.DenyOnce); err != nil {
			t.Fatal(err)
		}
		r.end()
		got, rerr := answer(t.Context())
		resp, ok := got.(acpsdk.RequestPermissionResponse)
		if rerr != nil || !ok || resp.Outcome.Selected == nil || resp.Outcome.Selected.OptionId != "reject" {
			t.Fatalf("round %d: goose was answered %+v (%v), want the reject option", i, got, rerr)
		}
	}
}

// TestEndedReplyWithoutDecisionIsCancelled: with no decision, an ended
// reply answers "cancelled" (goose waits forever on an unanswered request).
func TestEndedReplyWithoutDecisionIsCancelled(t *testing.T) {
	req := permissionRequest(t, `{"sessionId":"s1","toolCall":{"toolCallId":"call-1"},"options":[{"optionId":"reject","name":"Reject","kind":"reject_once"}]}`)
	cn := &conn{}
	r := newReply("s1", cn)
	c := &Client{replies: map[string]*reply{"s1": r}}
	answer := c.acceptPermission(cn, req)
	r.end()
	got, rerr := answer(t.Context())
	if resp, ok := got.(acpsdk.RequestPermissionResponse); rerr != nil || !ok || resp.Outcome.Cancelled == nil {
		t.Fatalf("goose was answered %+v (%v), want cancelled", got, rerr)
	}
}

// permissionRequest decodes goose's session/request_permission with these params.
func permissionRequest(t *testing.T, params string) *params {
	t.Helper()
	f, err := decodeFrame([]byte(`{"jsonrpc":"2.0","id":"r1","method":"session/request_permission","params":` + params + `}`))
	if err != nil {
		t.Fatalf("decoding the request: %v", err)
	}
	if f.Invalid != nil {
		t.Fatalf("decoding the request's params: %v", f.Invalid)
	}
	return &f.Params
}
