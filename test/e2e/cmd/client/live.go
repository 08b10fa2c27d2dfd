package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	neturl "net/url"
	"strings"
	"time"

	"github.com/gorilla/websocket"
)

// LiveTurn is one turn of a live conversation as the client saw it.
type LiveTurn struct {
	Sent      string `json:"sent"`
	Text      string `json:"text"`
	ErrorCode string `json:"errorCode,omitempty"`
	// Events counts the turn's events, the final one included.
	Events int `json:"events"`
}

// runLive plays three turns on one /run_live socket: text, a slow one
// stopped after its first event, and one more.
func runLive(ctx context.Context, base, token, app, user, sid, text string) ([]LiveTurn, error) {
	q := neturl.Values{"appName": {app}, "userId": {user}, "sessionId": {sid}}
	u := "ws" + strings.TrimPrefix(base, "http") + "/run_live?" + q.Encode()
	hdr := http.Header{}
	if token != "" {
		hdr.Set("Authorization", "Bearer "+token)
	}
	ws, resp, err := websocket.DefaultDialer.DialContext(ctx, u, hdr)
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("failed to open %s: HTTP %d: %w", u, resp.StatusCode, err)
		}
		return nil, fmt.Errorf("failed to open %s: %w", u, err)
	}
	defer ws.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = ws.SetReadDeadline(d)
	}
	var turns []LiveTurn
	for _, m := range []struct {
		text string
		stop bool
	}{{text, false}, {"slow 30", true}, {"again: " + text, false}} {
		t, err := liveTurn(ws, m.text, m.stop)
		if err != nil {
			return turns, err
		}
		turns = append(turns, t)
	}
	_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	return turns, nil
}

// liveTurn sends text and reads the turn to its final event; with stop it
// sends ADK's interrupt after the first event.
func liveTurn(ws *websocket.Conn, text string, stop bool) (LiveTurn, error) {
	t := LiveTurn{Sent: text}
	msg := map[string]any{"content": map[string]any{"role": "user", "parts": []any{map[string]any{"text": text}}}}
	if err := ws.WriteJSON(msg); err != nil {
		return t, fmt.Errorf("failed to send %q: %w", text, err)
	}
	var b strings.Builder
	for {
		var ev struct {
			Partial      bool   `json:"partial"`
			TurnComplete bool   `json:"turnComplete"`
			ErrorCode    string `json:"errorCode"`
			Content      *struct {
				Parts []struct {
					Text string `json:"text"`
				} `json:"parts"`
			} `json:"content"`
		}
		_, data, err := ws.ReadMessage()
		if err != nil {
			return t, fmt.Errorf("failed to read the turn of %q: %w", text, err)
		}
		if err := json.Unmarshal(data, &ev); err != nil {
			return t, fmt.Errorf("failed to decode an event: %w", err)
		}
		t.Events++
		if ev.Partial && ev.Content != nil {
			for _, p := range ev.Content.Parts {
				b.WriteString(p.Text)
			}
		}
		if stop && t.Events == 1 {
			if err := ws.WriteJSON(map[string]any{"activityStart": map[string]any{}}); err != nil {
				return t, fmt.Errorf("failed to send the stop: %w", err)
			}
		}
		if ev.TurnComplete && !ev.Partial {
			t.Text, t.ErrorCode = b.String(), ev.ErrorCode
			return t, nil
		}
	}
}
