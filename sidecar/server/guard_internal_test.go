package server

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// headerCounter counts header writes as net/http does: a flush sends the
// header, and WriteHeader after that is superfluous.
type headerCounter struct {
	*httptest.ResponseRecorder
	sent        bool
	superfluous int
}

func (h *headerCounter) WriteHeader(code int) {
	if h.sent {
		h.superfluous++
		return
	}
	h.sent = true
	h.ResponseRecorder.WriteHeader(code)
}

func (h *headerCounter) Flush() {
	h.sent = true
	h.ResponseRecorder.Flush()
}

// adkrest flushes before it writes its first SSE event: the header goes out
// once, with the flush.
func TestJSONErrorWriterFlushThenWriteSendsOneHeader(t *testing.T) {
	hc := &headerCounter{ResponseRecorder: httptest.NewRecorder()}
	j := &jsonErrorWriter{ResponseWriter: hc}
	j.Header().Set("Content-Type", "text/event-stream")
	j.Flush()
	if _, err := j.Write([]byte("data: {}\n\n")); err != nil {
		t.Fatal(err)
	}
	j.Flush()
	if hc.superfluous != 0 || hc.Code != http.StatusOK || hc.Body.String() != "data: {}\n\n" {
		t.Errorf("%d superfluous WriteHeader calls, status %d, body %q; want none, 200, the event", hc.superfluous, hc.Code, hc.Body)
	}
}
