package acp

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/adk2goose/goose-operator/sidecar/goose"
)

// updateFrame is a frame of method whose params carry update, an update's
// members.
func updateFrame(method, update string) string {
	return frameOf(method, `{"sessionId":"20260720_1","update":{`+update+`}}`)
}

// scannedUpdates are goose's usage and session info frames the scan reads
// itself, and the forms JSON allows them.
var scannedUpdates = []string{
	frameOf(decodeSeeds[5].method, decodeSeeds[5].params), // stable usage_update
	frameOf(decodeSeeds[6].method, decodeSeeds[6].params), // session_info_update, a run's end
	frameOf(decodeSeeds[8].method, decodeSeeds[8].params), // goose's usage_update
	frameOf(decodeSeeds[9].method, decodeSeeds[9].params), // message_usage
	// A run's start; activeRunId other than a string; no goose in _meta;
	// goose other than an object; title and updatedAt; members in any order.
	updateFrame(methodSessionUpdate, `"sessionUpdate":"session_info_update","_meta":{"goose":{"activeRunId":"run_\u00e9","other":[1,{}]},"x":1}`),
	updateFrame(methodSessionUpdate, `"_meta":{"goose":{"activeRunId":7}},"sessionUpdate":"session_info_update"`),
	updateFrame(methodSessionUpdate, `"sessionUpdate":"session_info_update","_meta":{"Goose":{"activeRunId":"r"}}`),
	updateFrame(methodSessionUpdate, `"sessionUpdate":"session_info_update","_meta":{"goose":"r"}`),
	updateFrame(methodSessionUpdate, `"sessionUpdate":"session_info_update","title":"Listing files","updatedAt":null,"_meta":null`),
	// The stable usage_update without a cost, with a null one, with one
	// that has no amount; white space; escapes in names and values.
	updateFrame(methodSessionUpdate, `"sessionUpdate":"usage_update","used":0,"size":128000`),
	updateFrame(methodSessionUpdate, `"sessionUpdate":"usage_update","used":-0,"size":1,"cost":null,"_meta":{"k":[true,false,null]}`),
	updateFrame(methodSessionUpdate, `"sessionUpdate":"usage_update","cost":{"currency":"USD"}`),
	" {\"params\" : {\"update\":{ \"us\\u0065d\" : 9223372036854775807 ,\n\"sessionUpdate\":\"usage\\u005fupdate\"}, \"sessionId\":\"s\"},\"method\":\"session\\/update\",\"jsonrpc\":\"2.0\"}\r\n",
	// goose's usage_update with an unknown cost; message_usage without
	// usage, or with only some of it.
	updateFrame(methodGooseUpdate, `"sessionUpdate":"usage_update","used":5,"contextLimit":9,"accumulatedInputTokens":3,"accumulatedOutputTokens":2,"accumulatedCost":null`),
	updateFrame(methodGooseUpdate, `"sessionUpdate":"usage_update","accumulatedCost":1.5e-3`),
	updateFrame(methodGooseUpdate, `"sessionUpdate":"message_usage","messageId":"m","usage":null`),
	updateFrame(methodGooseUpdate, `"sessionUpdate":"message_usage"`),
	updateFrame(methodGooseUpdate, `"sessionUpdate":"message_usage","usage":{"outputTokens":4,"costSource":"x","cost":null}`),
	frameOf(methodGooseUpdate, `{"_meta":{"a":{}},"sessionId":"s","update":{"sessionUpdate":"message_usage","usage":{}}}`),
}

// TestScanReadsGooseUpdates: goose's usage and session info frames, and the
// forms JSON allows them, are read by the scan as the transport and
// decodeNotification read them.
func TestScanReadsGooseUpdates(t *testing.T) {
	for i, frame := range scannedUpdates {
		scanned, ok := scanUpdateFrame([]byte(frame))
		if !ok {
			t.Errorf("update %d: not scanned: %s", i, frame)
			continue
		}
		viaDispatch, err := readThroughDispatch([]byte(frame))
		if err != nil || !reflect.DeepEqual(scanned, viaDispatch) {
			t.Errorf("update %d: scanned %+v (%#v), through dispatch %+v (%#v), %v", i, scanned, scanned.Event, viaDispatch, viaDispatch.Event, err)
		}
	}
	// What they mean, spelled out for goose's own frames.
	stable, _ := scanUpdateFrame([]byte(scannedUpdates[0]))
	if e, isUsage := stable.Event.(*goose.UsageUpdate); !isUsage || e.Last.TotalTokens != 2398 || e.ContextLimit != 128000 ||
		e.Accumulated.Cost == nil || *e.Accumulated.Cost != 0.0118 || !stable.StableUsage || stable.Custom {
		t.Errorf("stable usage_update: %+v (%#v)", stable, stable.Event)
	}
	ended, _ := scanUpdateFrame([]byte(scannedUpdates[1]))
	started, _ := scanUpdateFrame([]byte(scannedUpdates[4]))
	if ended.ActiveRun == nil || *ended.ActiveRun != "" || started.ActiveRun == nil || *started.ActiveRun != "run_é" || ended.Event != nil {
		t.Errorf("session_info_update: ended %+v, started %+v", ended, started)
	}
	custom, _ := scanUpdateFrame([]byte(scannedUpdates[2]))
	if e, isUsage := custom.Event.(*goose.UsageUpdate); !isUsage || !custom.Custom || custom.Accumulated == nil ||
		custom.Accumulated.InputTokens != 4420 || custom.Accumulated.TotalTokens != 4591 || !e.HasAccumulated {
		t.Errorf("goose usage_update: %+v (%#v)", custom, custom.Event)
	}
	message, _ := scanUpdateFrame([]byte(scannedUpdates[3]))
	if e, isUsage := message.Event.(*goose.UsageUpdate); !isUsage || e.Last.InputTokens != 2310 || e.Last.TotalTokens != 2398 || e.HasAccumulated {
		t.Errorf("message_usage: %+v (%#v)", message, message.Event)
	}
}

// TestScanLeavesUpdatesItCannotReadExactly: other kinds, and updates where
// the transport might read another thing than a strict reading (a name
// twice, in another case or unknown to the kind; a number its field would
// hold otherwise or ignore), are left to the transport.
func TestScanLeavesUpdatesItCannotReadExactly(t *testing.T) {
	stable := func(members string) string {
		return updateFrame(methodSessionUpdate, `"sessionUpdate":"usage_update",`+members)
	}
	custom := func(members string) string {
		return updateFrame(methodGooseUpdate, `"sessionUpdate":"usage_update",`+members)
	}
	info := func(members string) string {
		return updateFrame(methodSessionUpdate, `"sessionUpdate":"session_info_update",`+members)
	}
	for _, frame := range []string{
		// Other kinds, methods and messages.
		frameOf(decodeSeeds[0].method, decodeSeeds[0].params),
		frameOf(decodeSeeds[2].method, decodeSeeds[2].params),
		frameOf(decodeSeeds[7].method, decodeSeeds[7].params),
		frameOf(decodeSeeds[10].method, decodeSeeds[10].params),
		frameOf(methodGooseUpdate, decodeSeeds[5].params),
		frameOf(methodSessionUpdate, decodeSeeds[8].params),
		frameOf(methodSessionUpdate, decodeSeeds[9].params),
		frameOf("session/other", decodeSeeds[5].params),
		`{"jsonrpc":"2.0","params":` + decodeSeeds[5].params + `}`,
		`{"jsonrpc":"2.0","id":3,"method":"session/update","params":` + decodeSeeds[5].params + `}`,
		frameOf(methodSessionUpdate, `{"update":{"sessionUpdate":"usage_update","used":1}}`),
		frameOf(methodSessionUpdate, `{"sessionId":"","update":{"sessionUpdate":"usage_update","used":1}}`),
		frameOf(methodSessionUpdate, `{"sessionId":"s","update":{"used":1}}`),
		frameOf(methodSessionUpdate, `{"sessionId":"s","update":null}`),
		frameOf(methodSessionUpdate, `null`),
		// Members of another kind, unknown, twice or in another case.
		stable(`"used":1,"contextLimit":2`),
		custom(`"used":1,"size":2`),
		info(`"used":1`),
		stable(`"used":1,"used":2`),
		stable(`"Used":1`),
		stable(`"used":1,"extra":true`),
		stable(`"cost":{"amount":1,"currency":"USD","extra":1}`),
		stable(`"cost":{"amount":1,"amount":2}`),
		stable(`"cost":{"Amount":1}`),
		info(`"_meta":{"goose":{"activeRunId":"a"},"goose":{}}`),
		info(`"_meta":{"goose":{"activeRunId":"a","activeRunId":"b"}}`),
		updateFrame(methodGooseUpdate, `"sessionUpdate":"message_usage","usage":{"inputTokens":1,"InputTokens":2}`),
		updateFrame(methodGooseUpdate, `"sessionUpdate":"message_usage","usage":{"inputTokens":1,"inputTokens":2}`),
		updateFrame(methodGooseUpdate, `"sessionUpdate":"message_usage","usage":{"unknown":1}`),
		frameOf(methodSessionUpdate, `{"sessionId":"s","SessionId":"t","update":{"sessionUpdate":"usage_update"}}`),
		// Numbers the field holds otherwise, ignores (null) or cannot hold.
		stable(`"used":1.0`),
		stable(`"used":1e3`),
		stable(`"used":null`),
		stable(`"used":"1"`),
		stable(`"used":9223372036854775808`),
		stable(`"cost":{"amount":null}`),
		stable(`"cost":{"amount":1e400}`),
		stable(`"cost":{"currency":null}`),
		custom(`"accumulatedCost":1e400`),
		custom(`"contextLimit":-1.5`),
		info(`"_meta":{"goose":{"activeRunId":"a","n":1e400}}`),
		info(`"title":7`),
		updateFrame(methodGooseUpdate, `"sessionUpdate":"message_usage","messageId":null`),
		// Strings the transport would mend.
		info(`"_meta":{"goose":{"activeRunId":"\ud83d\ude00"}}`),
		info("\"_meta\":{\"goose\":{\"activeRunId\":\"\xff\"}}"),
		// Not JSON.
		stable(`"used":01`),
		stable(`"used":1`) + "x",
		strings.TrimSuffix(stable(`"used":1`), "}"),
		"",
	} {
		if d, ok := scanUpdateFrame([]byte(frame)); ok {
			t.Errorf("scanned %+v (%#v) from %s", d, d.Event, frame)
		}
	}
}

// FuzzScannedUpdatesReadAsDispatched: whatever frame the scan takes, the
// transport and decodeNotification read the same from it, without an error.
func FuzzScannedUpdatesReadAsDispatched(f *testing.F) {
	for _, frame := range scannedUpdates {
		f.Add([]byte(frame))
	}
	for _, s := range decodeSeeds {
		f.Add([]byte(frameOf(s.method, s.params)))
	}
	f.Add([]byte(updateFrame(methodSessionUpdate, `"sessionUpdate":"session_info_update","_meta":{"goose":{"activeRunId":"a"},"Goose":{"activeRunId":"b"}}`)))
	f.Add([]byte(updateFrame(methodGooseUpdate, `"sessionUpdate":"message_usage","usage":{"inputTokens":1,"cacheReadTokens":1e999}`)))
	f.Fuzz(func(t *testing.T, frame []byte) {
		scanned, ok := scanUpdateFrame(frame)
		if !ok {
			return
		}
		viaDispatch, err := readThroughDispatch(frame)
		if err != nil || !reflect.DeepEqual(scanned, viaDispatch) {
			t.Fatalf("scanned %+v (%#v); through dispatch %+v (%#v), %v", scanned, scanned.Event, viaDispatch, viaDispatch.Event, err)
		}
	})
}

// BenchmarkDecodeUpdate reads goose's usage and session info frames with
// the scan and as the transport and decodeNotification do, side by side.
// Run: go test -run '^$' -bench DecodeUpdate ./sidecar/goose/acp/
func BenchmarkDecodeUpdate(b *testing.B) {
	for i, name := range []string{"stable-usage", "session-info", "goose-usage", "message-usage"} {
		frame := []byte(scannedUpdates[i])
		for _, c := range []struct {
			name   string
			decode func([]byte) (decoded, error)
		}{
			{"scan", func(frame []byte) (decoded, error) {
				d, ok := scanUpdateFrame(frame)
				if !ok {
					return d, errors.New("not taken")
				}
				return d, nil
			}},
			{"rpc+sdk", readThroughDispatch},
		} {
			b.Run(name+"/"+c.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := c.decode(frame); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
