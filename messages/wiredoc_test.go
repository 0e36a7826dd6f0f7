package messages

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestWireDocKeys holds docs/wire.md to the code: each message table there
// lists exactly the msgpack keys of its Go type, and the long name of each
// key is its JSON name where the type has one, so the page a trainer in
// another language is written from cannot drift from the encoder.
func TestWireDocKeys(t *testing.T) {
	doc, err := os.ReadFile("../docs/wire.md")
	if err != nil {
		t.Fatal(err)
	}
	tables := wireDocTables(string(doc))
	for _, v := range []any{
		EpisodeRequest{}, SamplingParams{}, ChatMessage{}, StepEvent{}, Trajectory{}, TurnTimings{},
		Sample{}, Group{}, Failure{}, PolicyState{}, WorkerStatus{},
	} {
		typ := reflect.TypeOf(v)
		rows, ok := tables[typ.Name()]
		if !ok {
			t.Errorf("docs/wire.md has no table of %s", typ.Name())
			continue
		}
		fields := map[string]reflect.StructField{}
		for i := range typ.NumField() {
			f := typ.Field(i)
			key, _, _ := strings.Cut(f.Tag.Get("msgpack"), ",")
			if key != "" && key != "-" {
				fields[key] = f
			}
		}
		for key, name := range rows {
			f, ok := fields[key]
			if !ok {
				t.Errorf("%s: docs/wire.md lists key %q, which the type does not have", typ.Name(), key)
				continue
			}
			if j, _, _ := strings.Cut(f.Tag.Get("json"), ","); j != "" && j != "-" && name != j {
				t.Errorf("%s.%s: docs/wire.md names key %q %q, its JSON name is %q", typ.Name(), f.Name, key, name, j)
			}
		}
		var missing []string
		for key := range fields {
			if _, ok := rows[key]; !ok {
				missing = append(missing, key)
			}
		}
		slices.Sort(missing)
		if len(missing) > 0 {
			t.Errorf("%s: docs/wire.md does not list keys %q", typ.Name(), missing)
		}
	}
}

// wireDocTables reads the tables of the "### <Type>" sections of
// docs/wire.md whose header starts "| key | name": key → long name, by type.
func wireDocTables(doc string) map[string]map[string]string {
	tables := map[string]map[string]string{}
	var section string
	var rows map[string]string
	for line := range strings.Lines(doc) {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "### "):
			section, rows = strings.TrimPrefix(line, "### "), nil
		case strings.HasPrefix(line, "| key | name |"):
			rows = map[string]string{}
			tables[section] = rows
		case rows != nil && strings.HasPrefix(line, "|"):
			cells := strings.Split(line, "|")
			if len(cells) < 4 || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") {
				continue
			}
			rows[strings.Trim(strings.TrimSpace(cells[1]), "`")] = strings.Trim(strings.TrimSpace(cells[2]), "`")
		case line == "":
			rows = nil
		}
	}
	return tables
}
