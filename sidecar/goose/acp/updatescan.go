package acp

import (
	"strconv"

	"github.com/adk2goose/goose-operator/sidecar/goose"
)

// scanUpdateFrame reads, as scanTextChunkFrame reads text chunks, the other
// notifications goose sends with every reply: the stable usage_update and
// session_info_update (session/update), and its own usage_update and
// message_usage (_goose/unstable/session/update). Read through rpcMessage and
// then the SDK's union types or gooseUpdate, at 8-15 µs each against about
// 1 µs here (BenchmarkDecodeUpdate), these five frames a reply cost the
// sidecar's goose reader more than its hundred text chunks; and those
// decoders recurse deep enough to grow the stack of a goroutine that starts
// with 4 KiB, which the scan stays within.
//
// Like the text scan it only ever says less: ok is false, and the transport
// reads the frame as before, for any other kind, a name the kind does not
// have or that comes twice or in another case, a number its field cannot
// hold exactly as encoding/json would hold it (a fraction or exponent where
// an integer goes, a null the field would ignore), and everything
// scanTextChunkFrame leaves for the same reasons.
// FuzzScannedUpdatesReadAsDispatched holds it to that: what it takes, the
// transport and decodeNotification read the same.
func scanUpdateFrame(frame []byte) (_ decoded, ok bool) {
	s := scanner{b: frame}
	var d decoded
	var method []byte
	var f updateFields
	if !s.notification(&d, &method, func() bool {
		return s.object(func(key []byte) bool { return s.updateMember(&f, key) })
	}) {
		return decoded{}, false
	}
	switch string(method) {
	case methodSessionUpdate:
		return f.stable(d)
	case methodGooseUpdate:
		d.Custom = true
		return f.custom(d)
	}
	return decoded{}, false
}

// updateField names one member of an update; a set of them says which were
// read.
type updateField uint16

const (
	fieldKind updateField = 1 << iota
	fieldMeta
	fieldUsed
	fieldSize
	fieldCost
	fieldTitle
	fieldUpdatedAt
	fieldContextLimit
	fieldAccumulatedInput
	fieldAccumulatedOutput
	fieldAccumulatedCost
	fieldMessageID
	fieldUsage
)

var updateFieldNames = map[string]updateField{
	"sessionUpdate":           fieldKind,
	"_meta":                   fieldMeta,
	"used":                    fieldUsed,
	"size":                    fieldSize,
	"cost":                    fieldCost,
	"title":                   fieldTitle,
	"updatedAt":               fieldUpdatedAt,
	"contextLimit":            fieldContextLimit,
	"accumulatedInputTokens":  fieldAccumulatedInput,
	"accumulatedOutputTokens": fieldAccumulatedOutput,
	"accumulatedCost":         fieldAccumulatedCost,
	"messageId":               fieldMessageID,
	"usage":                   fieldUsage,
}

// updateFields is what the scan reads of an update of any of its kinds;
// which members the kind may have is checked once all are read (the kind
// can come last).
type updateFields struct {
	read updateField
	kind string

	used, size, contextLimit            int64
	accumulatedInput, accumulatedOutput int64
	cost                                *float64 // the stable cost's amount: 0 when it has none
	accumulatedCost                     *float64
	gooseMeta                           bool    // _meta.goose was read
	activeRun                           *string // _meta.goose.activeRunId, "" when not a string
	usage                               *goose.Usage
}

// only reports whether the update has its kind and no member but these.
func (f *updateFields) only(allowed updateField) bool {
	return f.read&fieldKind != 0 && f.read&^(allowed|fieldKind) == 0
}

// stable is what decodeSessionUpdate makes of a session/update.
func (f *updateFields) stable(d decoded) (decoded, bool) {
	switch {
	case f.kind == "usage_update" && f.only(fieldUsed|fieldSize|fieldCost|fieldMeta):
		d.stableUsage(f.used, f.size, f.cost)
	case f.kind == "session_info_update" && f.only(fieldMeta|fieldTitle|fieldUpdatedAt):
		d.ActiveRun = f.activeRun
	default:
		return decoded{}, false
	}
	return d, true
}

// custom is what decodeGooseUpdate makes of goose's own update.
func (f *updateFields) custom(d decoded) (decoded, bool) {
	switch {
	case f.kind == "usage_update" && f.only(fieldUsed|fieldContextLimit|fieldAccumulatedInput|fieldAccumulatedOutput|fieldAccumulatedCost):
		d.gooseUsage(f.used, f.contextLimit, goose.Usage{InputTokens: f.accumulatedInput, OutputTokens: f.accumulatedOutput, Cost: f.accumulatedCost})
	case f.kind == "message_usage" && f.only(fieldMessageID|fieldUsage):
		if f.usage != nil {
			d.messageUsage(*f.usage)
		}
	default:
		return decoded{}, false
	}
	return d, true
}

// updateMember reads one member of an update, each as its field in the SDK's
// type or gooseUpdate holds it.
func (s *scanner) updateMember(f *updateFields, key []byte) bool {
	field, known := updateFieldNames[string(key)]
	if !known || f.read&field != 0 {
		return false
	}
	f.read |= field
	switch field {
	case fieldKind:
		return s.strInto(&f.kind)
	case fieldMeta: // the SDK's map[string]any
		return s.objectOrNull(func(key []byte) bool {
			if string(key) == "goose" {
				return first(&f.gooseMeta) && s.activeRunMeta(f)
			}
			return s.skip(0)
		})
	case fieldUsed: // the SDK's int and gooseUpdate's int64: both hold an int
		return s.intInto(&f.used) && fitsInt(f.used)
	case fieldSize:
		return s.intInto(&f.size) && fitsInt(f.size)
	case fieldCost:
		return s.null() || s.stableCost(f)
	case fieldTitle, fieldUpdatedAt: // *string
		return s.null() || s.skipString()
	case fieldContextLimit:
		return s.intInto(&f.contextLimit)
	case fieldAccumulatedInput:
		return s.intInto(&f.accumulatedInput)
	case fieldAccumulatedOutput:
		return s.intInto(&f.accumulatedOutput)
	case fieldAccumulatedCost:
		return s.floatOrNullInto(&f.accumulatedCost)
	case fieldMessageID:
		return s.skipString()
	case fieldUsage:
		return s.null() || s.messageUsage(f)
	}
	return false
}

// activeRunMeta reads _meta.goose as decodeSessionUpdate looks into it: of
// an object, activeRunId (a string, else ""); any other value says nothing.
func (s *scanner) activeRunMeta(f *updateFields) bool {
	if s.peek() != '{' {
		return s.skip(0)
	}
	var read bool
	return s.object(func(key []byte) bool {
		if string(key) != "activeRunId" {
			return s.skip(0)
		}
		if !first(&read) {
			return false
		}
		run := ""
		f.activeRun = &run
		if s.peek() != '"' {
			return s.skip(0)
		}
		return s.strInto(&run)
	})
}

// stableCost reads the stable usage_update's cost: amount and currency.
func (s *scanner) stableCost(f *updateFields) bool {
	var amount float64
	var amountRead, currency bool
	f.cost = &amount
	return s.object(func(key []byte) bool {
		switch string(key) {
		case "amount":
			return first(&amountRead) && s.floatInto(&amount)
		case "currency":
			return first(&currency) && s.skipString()
		}
		return false
	})
}

// messageUsage reads message_usage's usage: the counts and cost goose's
// gooseUpdate reads, and the other members goose writes, which it ignores.
func (s *scanner) messageUsage(f *updateFields) bool {
	u := &goose.Usage{}
	f.usage = u
	var input, output, total, cost bool
	return s.object(func(key []byte) bool {
		switch string(key) {
		case "inputTokens":
			return first(&input) && s.intInto(&u.InputTokens)
		case "outputTokens":
			return first(&output) && s.intInto(&u.OutputTokens)
		case "totalTokens":
			return first(&total) && s.intInto(&u.TotalTokens)
		case "cost":
			return first(&cost) && s.floatOrNullInto(&u.Cost)
		case "cacheReadTokens", "cacheWriteTokens", "costSource", "elapsedMs", "timeToFirstTokenMs", "isCompaction":
			return s.skip(0) // no field of gooseUpdate's matches these names
		}
		return false
	})
}

// intInto reads an integer as encoding/json reads one into an int64 (a
// null, which it ignores, is left to it).
func (s *scanner) intInto(dst *int64) bool {
	s.space()
	start := s.i
	if !s.number() {
		return false
	}
	v, err := strconv.ParseInt(string(s.b[start:s.i]), 10, 64)
	*dst = v
	return err == nil
}

// fitsInt reports whether v fits the SDK's int fields (always, on 64 bits).
func fitsInt(v int64) bool { return int64(int(v)) == v }

// floatInto reads a number as encoding/json reads one into a float64.
func (s *scanner) floatInto(dst *float64) bool {
	s.space()
	start := s.i
	if !s.number() {
		return false
	}
	v, err := strconv.ParseFloat(string(s.b[start:s.i]), 64)
	*dst = v
	return err == nil
}

// floatOrNullInto reads a *float64: nil for null.
func (s *scanner) floatOrNullInto(dst **float64) bool {
	if s.null() {
		*dst = nil
		return true
	}
	v := new(float64)
	*dst = v
	return s.floatInto(v)
}
