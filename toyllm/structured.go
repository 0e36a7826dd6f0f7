package toyllm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/rollfleet/rollfleet/internal/jsonw"
	"github.com/rollfleet/rollfleet/internal/vllmapi"
)

// maxSchemaDepth bounds the nesting followed when building an instance, so a
// recursive $ref ends in an error instead of a stack overflow.
const maxSchemaDepth = 32

// maxInstanceRepeat bounds minItems and minLength, and maxInstanceBytes the
// instance, so a schema cannot make the stand-in build a huge reply.
const (
	maxInstanceRepeat = 1024
	maxInstanceBytes  = 64 << 10
)

// errSchema means a JSON schema the stand-in cannot build an instance of.
var errSchema = errors.New("schema")

// constrainedReply is the reply a structured_outputs object (vLLM's guided
// decoding) forces, or nil when there is none: for "json" the smallest
// instance of the schema, for "json_object" {}, for "choice" the first
// choice. The stand-in plans exactly that text, which is what a grammar
// that admits one token per step leaves a model to sample. "regex",
// "grammar" and "structural_tag" are refused, as a server without that
// backend refuses them.
func constrainedReply(so json.RawMessage) ([]byte, error) {
	so = bytes.TrimSpace(so)
	if len(so) == 0 || string(so) == "null" {
		return nil, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(so, &m); err != nil {
		return nil, vllmapi.BadRequest("structured_outputs must be an object: %v", err)
	}
	for k, v := range m {
		if string(bytes.TrimSpace(v)) == "null" {
			continue
		}
		switch k {
		case "json":
			schema := v
			if len(v) > 0 && v[0] == '"' { // a schema given as a JSON string, as vLLM accepts
				var s string
				if err := json.Unmarshal(v, &s); err != nil {
					return nil, vllmapi.BadRequest("structured_outputs.json: %v", err)
				}
				schema = json.RawMessage(s)
			}
			out, err := instance(nil, schema, schema, 0)
			if err != nil {
				return nil, vllmapi.BadRequest("structured_outputs.json: %v", err)
			}
			return out, nil
		case "json_object":
			return []byte("{}"), nil
		case "choice":
			var choices []string
			if err := json.Unmarshal(v, &choices); err != nil || len(choices) == 0 {
				return nil, vllmapi.BadRequest("structured_outputs.choice must be a non-empty list of strings")
			}
			return []byte(choices[0]), nil
		default:
			return nil, vllmapi.BadRequest("structured_outputs.%s is not supported by toyllm (json, json_object and choice are)", k)
		}
	}
	return nil, nil
}

// instance appends to dst the smallest JSON value schema admits: required
// properties only, minItems items, minLength characters, the minimum of a
// number, the first of an enum, anyOf or oneOf. root resolves "#/..." refs.
func instance(dst []byte, schema, root json.RawMessage, depth int) ([]byte, error) {
	switch {
	case depth > maxSchemaDepth:
		return nil, fmt.Errorf("%w nested deeper than %d levels", errSchema, maxSchemaDepth)
	case len(dst) > maxInstanceBytes:
		return nil, fmt.Errorf("%w: its smallest instance is over %d bytes", errSchema, maxInstanceBytes)
	}
	schema = bytes.TrimSpace(schema)
	switch string(schema) {
	case "", "true", "{}":
		return append(dst, "{}"...), nil
	case "false":
		return nil, fmt.Errorf("%w false admits no value", errSchema)
	}
	var s struct {
		Ref              string                     `json:"$ref"`
		Type             json.RawMessage            `json:"type"`
		Const            json.RawMessage            `json:"const"`
		Enum             []json.RawMessage          `json:"enum"`
		AnyOf            []json.RawMessage          `json:"anyOf"`
		OneOf            []json.RawMessage          `json:"oneOf"`
		AllOf            []json.RawMessage          `json:"allOf"`
		Properties       map[string]json.RawMessage `json:"properties"`
		Required         []string                   `json:"required"`
		Items            json.RawMessage            `json:"items"`
		MinItems         int                        `json:"minItems"`
		MinLength        int                        `json:"minLength"`
		Minimum          *float64                   `json:"minimum"`
		ExclusiveMinimum *float64                   `json:"exclusiveMinimum"`
	}
	if err := json.Unmarshal(schema, &s); err != nil {
		return nil, fmt.Errorf("%w: %v", errSchema, err)
	}
	if s.MinItems > maxInstanceRepeat || s.MinLength > maxInstanceRepeat {
		return nil, fmt.Errorf("%w: minItems and minLength above %d are not supported", errSchema, maxInstanceRepeat)
	}
	switch {
	case s.Ref != "":
		sub, err := resolveRef(root, s.Ref)
		if err != nil {
			return nil, err
		}
		return instance(dst, sub, root, depth+1)
	case len(s.Const) > 0:
		return appendCompact(dst, s.Const)
	case len(s.Enum) > 0:
		return appendCompact(dst, s.Enum[0])
	case len(s.AnyOf) > 0:
		return instance(dst, s.AnyOf[0], root, depth+1)
	case len(s.OneOf) > 0:
		return instance(dst, s.OneOf[0], root, depth+1)
	case len(s.AllOf) > 0:
		return instance(dst, s.AllOf[0], root, depth+1)
	}
	typ := "object"
	if len(s.Type) > 0 {
		var types []string
		if err := json.Unmarshal(s.Type, &typ); err != nil {
			if err := json.Unmarshal(s.Type, &types); err != nil || len(types) == 0 {
				return nil, fmt.Errorf("%w: type must be a string or a list of strings", errSchema)
			}
			typ = types[0]
		}
	}
	switch typ {
	case "object":
		dst = append(dst, '{')
		for i, name := range s.Required {
			if i > 0 {
				dst = append(dst, ", "...)
			}
			dst = jsonw.AppendString(dst, name)
			dst = append(dst, ": "...)
			var err error
			if dst, err = instance(dst, s.Properties[name], root, depth+1); err != nil {
				return nil, err
			}
		}
		return append(dst, '}'), nil
	case "array":
		dst = append(dst, '[')
		for i := range s.MinItems {
			if i > 0 {
				dst = append(dst, ", "...)
			}
			var err error
			if dst, err = instance(dst, s.Items, root, depth+1); err != nil {
				return nil, err
			}
		}
		return append(dst, ']'), nil
	case "string":
		return jsonw.AppendString(dst, strings.Repeat("a", s.MinLength)), nil
	case "integer", "number":
		v := 0.0
		switch {
		case s.Minimum != nil:
			v = *s.Minimum
		case s.ExclusiveMinimum != nil:
			v = *s.ExclusiveMinimum + 1
		}
		if typ == "integer" {
			return strconv.AppendInt(dst, int64(v), 10), nil
		}
		return strconv.AppendFloat(dst, v, 'g', -1, 64), nil
	case "boolean":
		return append(dst, "false"...), nil
	case "null":
		return append(dst, "null"...), nil
	}
	return nil, fmt.Errorf("%w: type %q is not supported", errSchema, typ)
}

// resolveRef finds a "#/a/b" reference in root.
func resolveRef(root json.RawMessage, ref string) (json.RawMessage, error) {
	path, ok := strings.CutPrefix(ref, "#")
	if !ok {
		return nil, fmt.Errorf("%w: only local $ref is supported, got %q", errSchema, ref)
	}
	cur := root
	for _, part := range strings.Split(strings.TrimPrefix(path, "/"), "/") {
		if part == "" {
			continue
		}
		part = strings.NewReplacer("~1", "/", "~0", "~").Replace(part)
		var m map[string]json.RawMessage
		if err := json.Unmarshal(cur, &m); err != nil || m[part] == nil {
			return nil, fmt.Errorf("%w: $ref %q does not resolve", errSchema, ref)
		}
		cur = m[part]
	}
	return cur, nil
}

// appendCompact appends a JSON value without insignificant whitespace.
func appendCompact(dst []byte, v json.RawMessage) ([]byte, error) {
	var b bytes.Buffer
	if err := json.Compact(&b, v); err != nil {
		return nil, fmt.Errorf("%w: %v", errSchema, err)
	}
	return append(dst, b.Bytes()...), nil
}
