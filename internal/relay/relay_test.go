package relay

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// closedAfter plays a server's inbound body that the server has drained and
// closed once the handler began its response: the declared bytes read, any
// later Read fails as net/http's does.
type closedAfter struct {
	r     io.Reader
	reads int
}

var errClosed = errors.New("http: invalid Read on closed Body")

func (c *closedAfter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if errors.Is(err, io.EOF) || n == 0 {
		c.reads++
		return 0, errClosed
	}
	return n, nil
}

func (c *closedAfter) Close() error { return nil }

// TestBodyEndsAtContentLength: the transport's check for more bytes than
// declared gets EOF from the limited body, not the closed body's error that would tear
// down the upstream connection (golang/go#40747).
func TestBodyEndsAtContentLength(t *testing.T) {
	inbound := &closedAfter{r: strings.NewReader(`{"sessionId":"s"}`)}
	in := httptest.NewRequest(http.MethodPost, "/run_sse", nil)
	in.Body, in.ContentLength = inbound, int64(len(`{"sessionId":"s"}`))

	// What transferWriter.writeBody does: copy the declared length, then read
	// on to check there is no more.
	LimitBody(in)
	body := in.Body
	var sent strings.Builder
	if _, err := io.Copy(&sent, io.LimitReader(body, in.ContentLength)); err != nil {
		t.Fatal(err)
	}
	if n, err := io.Copy(io.Discard, body); n != 0 || err != nil {
		t.Fatalf("check for extra bytes: %d, %v; want 0, nil", n, err)
	}
	if sent.String() != `{"sessionId":"s"}` || inbound.reads != 0 {
		t.Fatalf("sent %q; closed body read %d times after its end", sent.String(), inbound.reads)
	}

	// The same reads straight from the inbound body fail: what LimitBody prevents.
	raw := &closedAfter{r: strings.NewReader("x")}
	if _, err := io.Copy(io.Discard, io.LimitReader(raw, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, raw); !errors.Is(err, errClosed) {
		t.Fatalf("unwrapped check: %v, want the closed-body error", err)
	}
}

func TestBodyLeavesOthersAlone(t *testing.T) {
	for _, r := range []*http.Request{
		httptest.NewRequest(http.MethodGet, "/", nil),
		{Body: http.NoBody},
		{Body: io.NopCloser(strings.NewReader("chunked")), ContentLength: -1},
	} {
		before := r.Body
		if LimitBody(r); r.Body != before {
			t.Errorf("body of length %d was wrapped", r.ContentLength)
		}
	}
}
