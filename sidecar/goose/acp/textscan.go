package acp

import (
	"bytes"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/adk2goose/goose-operator/sidecar/goose"
)

// scanTextChunkFrame reads goose's text chunk frames without encoding/json:
// a strict scan of the one shape goose writes, in a single pass, with no
// reflection and no allocation besides the strings it returns. Reading them
// through encoding/json (unmarshalTextChunkFrame) was a quarter of the
// sidecar's CPU streaming replies at concurrency 50, more than anything
// else it does (BenchmarkDecodeTextChunk has both).
//
// It only ever says less: ok is false, and unmarshalTextChunkFrame decides,
// for anything it does not read exactly as encoding/json into textChunkFrame
// would: a name it does not know or that comes twice, a name in another case,
// a surrogate escape or invalid UTF-8 in a string it reads, a number that
// does not fit a float64, nesting deeper than
// maxScanDepth, any JSON error. FuzzScannedTextChunksReadAsUnmarshalled
// holds it to that: what it takes, the other reads the same.
func scanTextChunkFrame(frame []byte) (_ decoded, ok bool) {
	s := scanner{b: frame}
	var d decoded
	var method []byte
	var ev textChunkFields
	if !s.notification(&d, &method, func() bool { return s.update(&ev) }) || string(method) != methodSessionUpdate {
		return decoded{}, false
	}
	return ev.decoded(d.SessionID)
}

// notification reads a whole notification frame: jsonrpc, method (into
// method, aliasing the frame when it can) and params, whose update the
// update func reads. False for anything else in it, and for a frame without
// params or a sessionId.
func (s *scanner) notification(d *decoded, method *[]byte, update func() bool) bool {
	var methodRead, params bool
	return s.object(func(key []byte) bool {
		switch string(key) {
		case "jsonrpc":
			return s.skipString()
		case "method":
			return first(&methodRead) && s.bytesInto(method)
		case "params":
			return first(&params) && s.params(d, update)
		}
		return false // id, result, error, or a name the whole read would weigh
	}) && s.end() && params && d.SessionID != ""
}

// textChunkFields is what scanTextChunkFrame collects of a chunk's update.
type textChunkFields struct {
	kind         string // sessionUpdate
	content      bool   // a text content block was read
	text         []byte
	messageID    []byte // the ACP field; nil when absent or null
	gooseMessage []byte // _meta.goose.messageId
}

func (f *textChunkFields) decoded(sessionID string) (decoded, bool) {
	if !f.content {
		return decoded{}, false
	}
	id := string(f.gooseMessage)
	if len(f.messageID) > 0 {
		id = string(f.messageID)
	}
	d := decoded{SessionID: sessionID}
	switch f.kind {
	case "agent_message_chunk":
		d.Event = &goose.TextDelta{MessageID: id, Text: string(f.text)}
	case "agent_thought_chunk":
		d.Event = &goose.ThinkingDelta{MessageID: id, Text: string(f.text)}
	default:
		return decoded{}, false
	}
	return d, true
}

// params reads a notification's params: sessionId, update (read by the
// update func) and _meta.
func (s *scanner) params(d *decoded, update func() bool) bool {
	var id, updateRead, meta bool
	return s.object(func(key []byte) bool {
		switch string(key) {
		case "sessionId":
			return first(&id) && s.strInto(&d.SessionID)
		case "update":
			return first(&updateRead) && update()
		case "_meta": // an object of anything (the SDK's map[string]any), or null
			return first(&meta) && s.objectOrNull(s.skipMember)
		}
		return false
	})
}

// update reads a text chunk's update; any other field, such as those of a
// tool call, leaves the frame to the whole read.
func (s *scanner) update(f *textChunkFields) bool {
	var kind, content, messageID, meta bool
	return s.object(func(key []byte) bool {
		switch string(key) {
		case "sessionUpdate":
			return first(&kind) && s.strInto(&f.kind)
		case "content":
			return first(&content) && s.content(f)
		case "messageId":
			return first(&messageID) && (s.null() || s.bytesInto(&f.messageID))
		case "_meta":
			return first(&meta) && s.objectOrNull(func(key []byte) bool {
				if otherName(key, "goose") {
					return s.skip(0)
				}
				return string(key) == "goose" && s.gooseMeta(f)
			})
		}
		return false
	})
}

// gooseMeta reads the update's _meta.goose, of which only messageId counts.
func (s *scanner) gooseMeta(f *textChunkFields) bool {
	return s.objectOrNull(func(key []byte) bool {
		if otherName(key, "messageId") {
			return s.skip(0)
		}
		return string(key) == "messageId" && s.gooseMessageID(f)
	})
}

// gooseMessageID reads _meta.goose.messageId as stringOrNothing does: a
// string, or "" for any other value. It comes once: gooseMessage is nil
// until it is read.
func (s *scanner) gooseMessageID(f *textChunkFields) bool {
	if f.gooseMessage != nil {
		return false
	}
	if s.peek() != '"' {
		f.gooseMessage = []byte{}
		return s.skip(0)
	}
	return s.bytesInto(&f.gooseMessage) // non-nil once read, even when empty
}

// content reads a text content block: type "text", its text and an
// optional _meta; annotations or any other field leave it to the whole read.
func (s *scanner) content(f *textChunkFields) bool {
	var typ, text, meta bool
	ok := s.object(func(key []byte) bool {
		switch string(key) {
		case "type":
			return first(&typ) && s.is("text")
		case "text":
			return first(&text) && s.bytesInto(&f.text)
		case "_meta":
			return first(&meta) && s.objectOrNull(s.skipMember)
		}
		return false
	})
	f.content = ok && typ
	return ok && typ
}

// first reports whether a member is read for the first time, and marks it
// read: a name that comes twice (encoding/json keeps the last) is not taken.
func first(read *bool) bool {
	if *read {
		return false
	}
	*read = true
	return true
}

// strInto reads a string (str) into dst.
func (s *scanner) strInto(dst *string) bool {
	v, ok := s.str()
	*dst = string(v)
	return ok
}

// bytesInto reads a string (str) into dst, aliasing the frame when it can.
func (s *scanner) bytesInto(dst *[]byte) bool {
	v, ok := s.str()
	*dst = v
	return ok
}

// is reads a string and reports whether it is want.
func (s *scanner) is(want string) bool {
	v, ok := s.str()
	return ok && string(v) == want
}

// maxScanDepth bounds the nesting the scanner skips; deeper values are left
// to encoding/json.
const maxScanDepth = 32

// scanner is a strict reader of one JSON text (RFC 8259). Its methods
// return false on a JSON error and on anything the scan does not take, after
// which the scanner is of no further use.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek is the next byte after white space, 0 at the end.
func (s *scanner) peek() byte {
	s.space()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// consume takes c when it is the next byte after white space.
func (s *scanner) consume(c byte) bool {
	if s.peek() == c {
		s.i++
		return true
	}
	return false
}

// end: nothing but white space is left.
func (s *scanner) end() bool {
	s.space()
	return s.i == len(s.b)
}

// literal takes word (true, false, null).
func (s *scanner) literal(word string) bool {
	s.space()
	if !bytes.HasPrefix(s.b[s.i:], []byte(word)) {
		return false
	}
	s.i += len(word)
	return true
}

func (s *scanner) null() bool {
	if s.peek() == 'n' {
		return s.literal("null")
	}
	return false
}

// object reads an object, calling member with each name, unescaped as
// encoding/json matches it (str), and the scanner before its value, which
// member must read.
func (s *scanner) object(member func(key []byte) bool) bool {
	if !s.consume('{') {
		return false
	}
	if s.consume('}') {
		return true
	}
	for {
		key, ok := s.str()
		if !ok || !s.consume(':') || !member(key) {
			return false
		}
		if !s.consume(',') {
			return s.consume('}')
		}
	}
}

func (s *scanner) objectOrNull(member func(key []byte) bool) bool {
	return s.null() || s.object(member)
}

// skipMember skips the value of a member of a map[string]any.
func (s *scanner) skipMember([]byte) bool { return s.skip(0) }

// otherName reports whether encoding/json would not match key to field:
// it matches names case-insensitively, with Unicode folding beyond ASCII,
// so a key that might match is not another name, even when it is not field
// exactly.
func otherName(key []byte, field string) bool {
	for _, c := range key {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return !bytes.EqualFold(key, []byte(field))
}

// str reads a string as encoding/json decodes it, where that is certain:
// valid UTF-8 and no surrogate escapes (encoding/json replaces what is
// invalid or unpaired, and pairs the rest). It aliases the frame when the
// string has no escape.
func (s *scanner) str() ([]byte, bool) {
	if !s.consume('"') {
		return nil, false
	}
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		if c == '"' {
			v := s.b[start:s.i]
			s.i++
			return v, utf8.Valid(v)
		}
		if c == '\\' {
			return s.unescape(start)
		}
		if c < 0x20 {
			return nil, false
		}
		s.i++
	}
	return nil, false
}

// unescape finishes reading a string from the first escape at s.i, the
// string's content having begun at start.
func (s *scanner) unescape(start int) ([]byte, bool) {
	out := make([]byte, s.i-start, len(s.b)-start)
	copy(out, s.b[start:s.i])
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return out, utf8.Valid(out)
		case c < 0x20:
			return nil, false
		case c != '\\':
			out = append(out, c)
			s.i++
			continue
		}
		if s.i+1 >= len(s.b) {
			return nil, false
		}
		switch e := s.b[s.i+1]; e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(s.b[s.i+2:])
			if !ok || utf16.IsSurrogate(r) {
				return nil, false
			}
			out = utf8.AppendRune(out, r)
			s.i += 4
		default:
			return nil, false
		}
		s.i += 2
	}
	return nil, false
}

// hex4 reads the 4 hex digits of a \u escape.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// skipString reads any valid string.
func (s *scanner) skipString() bool {
	if !s.consume('"') {
		return false
	}
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return true
		case c < 0x20:
			return false
		case c == '\\':
			if s.i+1 >= len(s.b) {
				return false
			}
			switch s.b[s.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if _, ok := hex4(s.b[s.i+2:]); !ok {
					return false
				}
				s.i += 4
			default:
				return false
			}
			s.i += 2
			continue
		}
		s.i++
	}
	return false
}

// skip reads any value at nesting depth; a number must fit a float64, as
// encoding/json needs when it decodes into any.
func (s *scanner) skip(depth int) bool {
	if depth >= maxScanDepth {
		return false
	}
	switch s.peek() {
	case '{':
		s.i++
		if s.consume('}') {
			return true
		}
		for {
			if s.peek() != '"' || !s.skipString() || !s.consume(':') || !s.skip(depth+1) {
				return false
			}
			if !s.consume(',') {
				return s.consume('}')
			}
		}
	case '[':
		s.i++
		if s.consume(']') {
			return true
		}
		for {
			if !s.skip(depth + 1) {
				return false
			}
			if !s.consume(',') {
				return s.consume(']')
			}
		}
	case '"':
		return s.skipString()
	case 't':
		return s.literal("true")
	case 'f':
		return s.literal("false")
	case 'n':
		return s.literal("null")
	}
	return s.number()
}

// number reads a number (RFC 8259 §6) that fits a float64.
func (s *scanner) number() bool {
	start, exponent := s.i, false
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case s.digits() == 0:
		return false
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if s.digits() == 0 {
			return false
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		exponent = true
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if s.digits() == 0 {
			return false
		}
	}
	// Fewer than 309 digits and no exponent is below math.MaxFloat64; the
	// check is skipped for those (goose's times and counts), as its frame
	// would take the reader's stack past 4 KiB.
	if !exponent && s.i-start < 309 {
		return true
	}
	_, err := strconv.ParseFloat(string(s.b[start:s.i]), 64)
	return err == nil
}

func (s *scanner) digits() int {
	n := 0
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
		n++
	}
	return n
}
