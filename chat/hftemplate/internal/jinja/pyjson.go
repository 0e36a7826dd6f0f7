package jinja

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// filterTojson is Hugging Face's tojson: Python's json.dumps(x,
// ensure_ascii=False, indent=None, separators=None, sort_keys=False), byte
// for byte, keys in insertion order.
func filterTojson(args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) == 0 {
		return Undefined(), fmt.Errorf("tojson: no value")
	}
	enc := pyJSON{item: ", ", key: ": "}
	if v, ok := kwargs["indent"]; ok && !v.IsNone() && !v.IsUndefined() {
		switch {
		case v.IsInt():
			enc.indent = strings.Repeat(" ", max(int(v.AsInt()), 0))
		case v.IsString():
			enc.indent = v.AsString()
		default:
			return Undefined(), fmt.Errorf("tojson: indent must be an integer or a string")
		}
		enc.indented = true
		enc.item = "," // json.dumps's default separators when indenting
	}
	if v, ok := kwargs["separators"]; ok && !v.IsNone() && !v.IsUndefined() {
		if !v.IsList() || v.AsList().Len() != 2 || !v.AsList().Items[0].IsString() || !v.AsList().Items[1].IsString() {
			return Undefined(), fmt.Errorf("tojson: separators must be two strings")
		}
		enc.item, enc.key = v.AsList().Items[0].AsString(), v.AsList().Items[1].AsString()
	}
	enc.ascii = kwargs["ensure_ascii"].IsTruthy()
	enc.sortKeys = kwargs["sort_keys"].IsTruthy()
	var sb strings.Builder
	if err := enc.value(&sb, args[0], 0); err != nil {
		return Undefined(), err
	}
	return NewString(sb.String()), nil
}

// pyJSON holds json.dumps's options.
type pyJSON struct {
	item, key string
	indented  bool
	indent    string
	ascii     bool
	sortKeys  bool
}

func (p pyJSON) newline(sb *strings.Builder, depth int) {
	if p.indented {
		sb.WriteByte('\n')
		for range depth {
			sb.WriteString(p.indent)
		}
	}
}

func (p pyJSON) value(sb *strings.Builder, v Value, depth int) error {
	switch v.kind {
	case KindBool:
		sb.WriteString(strconv.FormatBool(v.AsBool()))
	case KindInt:
		sb.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case KindFloat:
		sb.WriteString(pyFloatJSON(v.AsFloat()))
	case KindString:
		p.str(sb, v.AsString())
	case KindList:
		items := v.AsList().Items
		if len(items) == 0 {
			sb.WriteString("[]")
			return nil
		}
		sb.WriteByte('[')
		for i, item := range items {
			if i > 0 {
				sb.WriteString(p.item)
			}
			p.newline(sb, depth+1)
			if err := p.value(sb, item, depth+1); err != nil {
				return err
			}
		}
		p.newline(sb, depth)
		sb.WriteByte(']')
	case KindDict:
		d := v.AsDict()
		if d.Len() == 0 {
			sb.WriteString("{}")
			return nil
		}
		keys := d.Keys
		if p.sortKeys {
			keys = slices.Sorted(slices.Values(keys))
		}
		sb.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				sb.WriteString(p.item)
			}
			p.newline(sb, depth+1)
			p.str(sb, k)
			sb.WriteString(p.key)
			if err := p.value(sb, d.Data[k], depth+1); err != nil {
				return err
			}
		}
		p.newline(sb, depth)
		sb.WriteByte('}')
	default: // none, undefined, callables
		sb.WriteString("null")
	}
	return nil
}

// str writes s as json.dumps does: only '"', '\\' and control characters
// are escaped (\n, \r, \t, \b, \f by name, the rest as \u00xx), and with
// ensure_ascii everything past ASCII as \uxxxx (UTF-16 surrogate pairs).
func (p pyJSON) str(sb *strings.Builder, s string) {
	sb.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			sb.WriteString(`\"`)
		case '\\':
			sb.WriteString(`\\`)
		case '\n':
			sb.WriteString(`\n`)
		case '\r':
			sb.WriteString(`\r`)
		case '\t':
			sb.WriteString(`\t`)
		case '\b':
			sb.WriteString(`\b`)
		case '\f':
			sb.WriteString(`\f`)
		default:
			switch {
			case r < 0x20 || (p.ascii && r > 0x7e && r <= 0xffff):
				fmt.Fprintf(sb, `\u%04x`, r)
			case p.ascii && r > 0xffff:
				r -= 0x10000
				fmt.Fprintf(sb, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
			default:
				sb.WriteRune(r)
			}
		}
	}
	sb.WriteByte('"')
}

// pyFloatJSON is json.dumps's spelling of a float: repr, and NaN and
// Infinity as Python writes them.
func pyFloatJSON(f float64) string {
	switch s := pyFloatRepr(f); s {
	case "nan":
		return "NaN"
	case "inf":
		return "Infinity"
	case "-inf":
		return "-Infinity"
	default:
		return s
	}
}

// pyFloatRepr is Python's repr of a float: the shortest digits that read
// back the same, positional for decimal exponents in [-4, 16), else
// scientific with a signed two-digit exponent; an integral value keeps ".0".
func pyFloatRepr(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	sci := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	mant, expText, _ := strings.Cut(sci, "e")
	exp, _ := strconv.Atoi(expText)
	if exp < -4 || exp >= 16 {
		sign := "+"
		if exp < 0 {
			sign, exp = "-", -exp
		}
		return fmt.Sprintf("%se%s%02d", mant, sign, exp)
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsRune(s, '.') {
		s += ".0"
	}
	return s
}
