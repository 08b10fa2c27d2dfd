package rest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/adk2goose/goose-operator/sidecar/goose"
)

// The frames that arrived with the one Next read are Ready, a Ping among
// them skipped; once they are taken, Ready is false while goose works on.
func TestReadyForFramesThatArrivedTogether(t *testing.T) {
	text := func(s string) string {
		return `data: {"type":"Message","message":{"id":"m1","role":"assistant","created":1,"content":[{"type":"text","text":"` + s + `"}],"metadata":{"userVisible":true,"agentVisible":true}}}` + "\n\n"
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/reply" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		// One write: the frames reach the client together.
		_, _ = io.WriteString(w, text("a")+`data: {"type":"Ping"}`+"\n\n"+text("b"))
		w.(http.Flusher).Flush()
		<-r.Context().Done() // goose works on until the reply is closed
	}))
	defer srv.Close()
	c, err := New(Config{URL: srv.URL, SecretKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := c.OpenReply(t.Context(), "s1", goose.UserMessage{Text: "hi"}).(goose.ReadyStream)
	defer s.Close()
	next := func(want string) {
		t.Helper()
		ev, err, ok := s.Next()
		if d, isText := ev.(*goose.TextDelta); !ok || err != nil || !isText || d.Text != want {
			t.Fatalf("Next = %#v, %v, %v; want the delta %q", ev, err, ok, want)
		}
	}
	next("a")
	if !s.Ready() {
		t.Fatal("not Ready, although the next frame arrived with the first")
	}
	next("b")
	if s.Ready() {
		t.Fatal("Ready while goose works on")
	}
}
