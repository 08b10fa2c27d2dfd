package acp

import (
	"reflect"
	"strings"
	"testing"

	"github.com/adk2goose/goose-operator/sidecar/goose"
)

// chunkParams is a text chunk's params as goose writes them, with the
// update's fields in place of %s.
func chunkParams(update string) string {
	return `{"sessionId":"20260720_1","update":{` + update + `}}`
}

// scannedChunks are text chunk frames the scan reads itself, with what they
// say: goose's own, and the variations JSON allows them.
var scannedChunks = []struct {
	frame string
	want  goose.Event
}{
	{frameOf(decodeSeeds[0].method, decodeSeeds[0].params), &goose.TextDelta{MessageID: "msg_a1", Text: "Let me look."}},
	{frameOf(decodeSeeds[1].method, decodeSeeds[1].params), &goose.ThinkingDelta{MessageID: "msg_a1", Text: "I should list"}},
	// Escapes goose writes in text (serde_json: quotes, backslashes,
	// control characters) and others JSON allows.
	{frameOf(methodSessionUpdate, chunkParams(`"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"a \"b\"\\\n\tc\u0001\/\u00e9\u20ac"},"_meta":{"goose":{"created":1784563200,"messageId":"m"}}`)),
		&goose.TextDelta{MessageID: "m", Text: "a \"b\"\\\n\tc\x01/é€"}},
	// Raw UTF-8, white space between tokens, members in another order.
	{" {\"params\" : {\"update\":{ \"content\":{\"text\":\"日本 😀\",\"type\":\"text\"},\n\"sessionUpdate\":\"agent_message_chunk\"}, \"sessionId\":\"s\"},\"method\":\"session/update\",\"jsonrpc\":\"2.0\"}\r\n",
		&goose.TextDelta{Text: "日本 😀"}},
	// The ACP messageId wins over goose's; a null or empty one does not.
	{frameOf(methodSessionUpdate, chunkParams(`"sessionUpdate":"agent_message_chunk","messageId":"m1","content":{"type":"text","text":"x"},"_meta":{"goose":{"messageId":"m2"}}`)),
		&goose.TextDelta{MessageID: "m1", Text: "x"}},
	{frameOf(methodSessionUpdate, chunkParams(`"sessionUpdate":"agent_message_chunk","messageId":null,"content":{"type":"text","text":"x"},"_meta":{"goose":{"messageId":"m2"}}`)),
		&goose.TextDelta{MessageID: "m2", Text: "x"}},
	{frameOf(methodSessionUpdate, chunkParams(`"sessionUpdate":"agent_message_chunk","messageId":"","content":{"type":"text","text":"x"},"_meta":{"goose":{"messageId":"m2"}}`)),
		&goose.TextDelta{MessageID: "m2", Text: "x"}},
	// Names are matched unescaped, as encoding/json matches them.
	{frameOf(methodSessionUpdate, chunkParams(`"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x"},"_meta":{"go\u006fse":{"messageId":"m"}}`)),
		&goose.TextDelta{MessageID: "m", Text: "x"}},
	// goose's messageId as stringOrNothing reads it; other _meta as is.
	{frameOf(methodSessionUpdate, chunkParams(`"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x","_meta":{"a":[1,-2.5e3,true,null,{"b":"\u00e9"}]}},"_meta":{"goose":{"messageId":7},"other":{"x":[]}}`)),
		&goose.TextDelta{Text: "x"}},
	{`{"jsonrpc":"2.0","method":"session/update","params":{"_meta":{"k":{}},"sessionId":"s","update":{"sessionUpdate":"agent_thought_chunk","content":{"type":"text"},"_meta":null}}}`,
		&goose.ThinkingDelta{}},
	// The largest integers a float64 holds, written out.
	{`{"jsonrpc":"2.0","method":"session/update","params":{"_meta":{"k":-1` + strings.Repeat("0", 307) + `},"sessionId":"s","update":{"sessionUpdate":"agent_thought_chunk","content":{"type":"text"}}}}`,
		&goose.ThinkingDelta{}},
}

// TestScanReadsGooseTextChunks: goose's text chunk frames, and the forms
// JSON allows them, are read by the scan, as encoding/json reads them.
func TestScanReadsGooseTextChunks(t *testing.T) {
	for i, c := range scannedChunks {
		scanned, ok := scanTextChunkFrame([]byte(c.frame))
		if !ok {
			t.Errorf("chunk %d: not scanned: %s", i, c.frame)
			continue
		}
		if !reflect.DeepEqual(scanned.Event, c.want) || scanned.SessionID == "" {
			t.Errorf("chunk %d: scanned %+v (%#v), want %#v", i, scanned, scanned.Event, c.want)
		}
		whole, ok := unmarshalTextChunkFrame([]byte(c.frame))
		if !ok || !reflect.DeepEqual(scanned, whole) {
			t.Errorf("chunk %d: scanned %+v (%#v), encoding/json %+v (%#v), %v", i, scanned, scanned.Event, whole, whole.Event, ok)
		}
	}
}

// TestScanLeavesWhatItCannotReadExactly: frames that are no text chunk,
// and text chunks where encoding/json might read another thing than a
// strict reading (a name twice or in another case, a surrogate escape,
// invalid UTF-8, a number beyond float64), are left to encoding/json.
func TestScanLeavesWhatItCannotReadExactly(t *testing.T) {
	chunk := func(update string) string { return frameOf(methodSessionUpdate, chunkParams(update)) }
	const text = `"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x"}`
	for _, frame := range []string{
		// Not a text chunk.
		frameOf(decodeSeeds[2].method, decodeSeeds[2].params),
		frameOf(decodeSeeds[5].method, decodeSeeds[5].params),
		frameOf(methodGooseUpdate, decodeSeeds[0].params),
		chunk(`"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"x"}`),
		chunk(`"sessionUpdate":"agent_message_chunk","content":{"type":"image","data":"AA==","mimeType":"image/png"}`),
		chunk(`"sessionUpdate":"agent_message_chunk"`),
		frameOf(methodSessionUpdate, `{"update":{`+text+`}}`),
		frameOf(methodSessionUpdate, `{"sessionId":"","update":{`+text+`}}`),
		`{"jsonrpc":"2.0","id":3,"method":"session/update","params":` + chunkParams(text) + `}`,
		`{"jsonrpc":"2.0","id":4,"result":{"stopReason":"end_turn"}}`,
		// Names twice or in another case.
		chunk(text + `,"sessionUpdate":"agent_thought_chunk"`),
		chunk(`"SessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x"}`),
		chunk(text + `,"_meta":{"Goose":{"messageId":"m"}}`),
		chunk(text + `,"_meta":{"goose":{"messageID":"m"}}`),
		chunk(text + `,"_meta":{"goose":{"messageId":"a","messageId":"b"}}`),
		// Strings encoding/json would mend.
		chunk(`"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"\ud83d\ude00"}`),
		chunk("\"sessionUpdate\":\"agent_message_chunk\",\"content\":{\"type\":\"text\",\"text\":\"\xff\"}"),
		// Numbers the SDK's map[string]any cannot hold; annotations.
		frameOf(methodSessionUpdate, `{"_meta":{"n":1e400},"sessionId":"s","update":{`+text+`}}`),
		frameOf(methodSessionUpdate, `{"_meta":{"n":-1`+strings.Repeat("0", 309)+`},"sessionId":"s","update":{`+text+`}}`),
		chunk(`"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x","annotations":{"priority":1}}`),
		// Not JSON.
		chunk(text) + "x",
		chunk(`"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x` + "\n" + `"}`),
		chunk(text + `,"_meta":{"goose":{"created":01}}`),
		strings.TrimSuffix(chunk(text), "}"),
		"",
	} {
		if d, ok := scanTextChunkFrame([]byte(frame)); ok {
			t.Errorf("scanned %+v (%#v) from %s", d, d.Event, frame)
		}
	}
}

// FuzzScannedTextChunksReadAsUnmarshalled: whatever frame the scan takes,
// encoding/json reads the same from it; and from none that mayBeTextChunk
// rules out does it read a text chunk.
func FuzzScannedTextChunksReadAsUnmarshalled(f *testing.F) {
	for _, c := range scannedChunks {
		f.Add([]byte(c.frame))
	}
	for _, s := range decodeSeeds {
		f.Add([]byte(frameOf(s.method, s.params)))
	}
	f.Add([]byte(frameOf(methodSessionUpdate, chunkParams(`"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"\ud83d\ude00\u0041"},"_meta":{"Goose":{"messageId":"m"},"goose":{"messageId":"\u00e9"}}`))))
	f.Add([]byte(frameOf(methodSessionUpdate, chunkParams(`"sessionUpdate":"agent_message\u005fchunk","content":{"type":"text","text":"x"}`))))
	f.Fuzz(func(t *testing.T, frame []byte) {
		if !mayBeTextChunk(frame) {
			if d, ok := unmarshalTextChunkFrame(frame); ok {
				t.Fatalf("encoding/json reads a text chunk %+v (%#v) from a frame mayBeTextChunk rules out", d, d.Event)
			}
		}
		scanned, ok := scanTextChunkFrame(frame)
		if !ok {
			return
		}
		whole, wholeOK := unmarshalTextChunkFrame(frame)
		if !wholeOK || !reflect.DeepEqual(scanned, whole) {
			t.Fatalf("scanned %+v (%#v); encoding/json %+v (%#v), %v", scanned, scanned.Event, whole, whole.Event, wholeOK)
		}
	})
}
