package envs

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestRegistryIDsAndSpecs(t *testing.T) {
	wantIDs := []string{gtnAlias, gtnEasy, gtnHard, gtnRandom}
	// Other families have tests of their own.
	var specs []Spec
	for _, s := range Specs() {
		if s.Family == "GuessTheNumber" {
			specs = append(specs, s)
		}
	}
	if !slices.IsSortedFunc(Specs(), func(a, b Spec) int { return strings.Compare(a.ID, b.ID) }) {
		t.Fatal("Specs() is not sorted by id")
	}
	if !slices.Equal(IDs(), slices.Collect(func(yield func(string) bool) {
		for _, s := range Specs() {
			if !yield(s.ID) {
				return
			}
		}
	})) {
		t.Fatal("IDs() differs from the ids of Specs()")
	}
	wantSpecs := map[string]struct {
		params   map[string]any
		maxTurns int
	}{
		gtnAlias:  {map[string]any{"min_number": 1, "max_number": 20, "max_turns": 10}, 10},
		gtnEasy:   {map[string]any{"min_number": 1, "max_number": 10, "max_turns": 4}, 4},
		gtnHard:   {map[string]any{"min_number": 1, "max_number": 50, "max_turns": 7}, 7},
		gtnRandom: {map[string]any{"min_number": nil, "max_number": nil, "max_turns": nil}, 0},
	}
	if len(specs) != len(wantIDs) {
		t.Fatalf("Specs() has %d entries, want %d", len(specs), len(wantIDs))
	}
	for i, s := range specs {
		if s.ID != wantIDs[i] {
			t.Fatalf("Specs()[%d].ID = %q, want %q (sorted)", i, s.ID, wantIDs[i])
		}
		w := wantSpecs[s.ID]
		if s.Family != "GuessTheNumber" || s.MaxTurns != w.maxTurns || s.ChatSuffix != "Enter your next guess within \\boxed{}." {
			t.Errorf("%s: spec %+v", s.ID, s)
		}
		if len(s.Params) != len(w.params) {
			t.Errorf("%s: params %v, want %v", s.ID, s.Params, w.params)
		}
		for k, v := range w.params {
			if got, ok := s.Params[k]; !ok || got != v {
				t.Errorf("%s: params[%q] = %v, want %v", s.ID, k, got, v)
			}
		}
	}
}

func TestLookupReturnsCopy(t *testing.T) {
	s, err := Lookup(gtnEasy)
	if err != nil {
		t.Fatal(err)
	}
	s.Params["max_turns"] = 99
	env := mustNew(t, gtnEasy)
	env.Reset(NewRNG(1))
	if again, _ := Lookup(gtnEasy); again.Params["max_turns"] != 4 || env.MaxTurns() != 4 {
		t.Errorf("changing a looked-up spec changed the registry: %v, MaxTurns() = %d", again.Params, env.MaxTurns())
	}
}

func TestUnknownEnv(t *testing.T) {
	_, lookupErr := Lookup("game:GuessTheNumber-v1")
	_, newErr := New("game:GuessTheNumber-v1", nil)
	for _, err := range []error{lookupErr, newErr} {
		if !errors.Is(err, ErrUnknownEnv) {
			t.Fatalf("error %v does not wrap ErrUnknownEnv", err)
		}
		msg := err.Error()
		if !strings.Contains(msg, `"game:GuessTheNumber-v1"`) || !strings.Contains(msg, strings.Join(IDs(), ", ")) {
			t.Errorf("error %q should name the id and list the known ids, sorted", msg)
		}
	}
}

func TestNewOverrides(t *testing.T) {
	tests := []struct {
		name, id, opts  string
		wantRandom      bool
		wantMin         int
		wantMax         int
		wantMaxTurns    int
		wantInstruction string
	}{
		{name: "no opts", id: gtnEasy, wantMin: 1, wantMax: 10, wantMaxTurns: 4},
		{name: "null opts", id: gtnEasy, opts: `null`, wantMin: 1, wantMax: 10, wantMaxTurns: 4},
		{name: "empty object", id: gtnHard, opts: `{}`, wantMin: 1, wantMax: 50, wantMaxTurns: 7},
		{name: "max_turns", id: gtnEasy, opts: `{"max_turns": 6}`, wantMin: 1, wantMax: 10, wantMaxTurns: 6,
			wantInstruction: "between 1 and 10 (inclusive) within 6 turns."},
		{name: "range", id: gtnAlias, opts: `{"min_number": 5, "max_number": 9}`, wantMin: 5, wantMax: 9, wantMaxTurns: 10,
			wantInstruction: "between 5 and 9 (inclusive) within 10 turns."},
		{name: "unknown keys ignored", id: gtnEasy, opts: `{"seed": 3, "foo": "bar", "max_turns": 5}`, wantMin: 1, wantMax: 10, wantMaxTurns: 5},
		{name: "null bound makes it random", id: gtnEasy, opts: `{"min_number": null}`, wantRandom: true},
		{name: "fixed range on the random id", id: gtnRandom, opts: `{"min_number": 2, "max_number": 8, "max_turns": 3}`,
			wantMin: 2, wantMax: 8, wantMaxTurns: 3},
		{name: "one bound stays random", id: gtnRandom, opts: `{"min_number": 2, "max_turns": 3}`, wantRandom: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newTestEnv(t, tt.id, tt.opts, "")
			var s gtnState
			if err := json.Unmarshal(env.Snapshot(), &s); err != nil {
				t.Fatal(err)
			}
			if s.Random != tt.wantRandom {
				t.Fatalf("random = %v, want %v", s.Random, tt.wantRandom)
			}
			if tt.wantRandom {
				// Reset drew the range; the bounds and turn limit given were overwritten, as in GEM.
				if d := s.MaxNumber - s.MinNumber; s.MinNumber < 1 || s.MinNumber > 10 || d < 5 || d > 50 ||
					s.MaxTurns != ceilSqrt(d)+1 {
					t.Errorf("drawn state out of bounds: %s", env.Snapshot())
				}
				return
			}
			if s.MinNumber != tt.wantMin || s.MaxNumber != tt.wantMax || s.MaxTurns != tt.wantMaxTurns || env.MaxTurns() != tt.wantMaxTurns {
				t.Errorf("state %s, want min %d max %d max_turns %d", env.Snapshot(), tt.wantMin, tt.wantMax, tt.wantMaxTurns)
			}
			if !strings.Contains(env.Instructions(), tt.wantInstruction) {
				t.Errorf("instructions lack %q:\n%s", tt.wantInstruction, env.Instructions())
			}
		})
	}
}

func TestNewBadOption(t *testing.T) {
	tests := []badOption{
		{"string max_turns", gtnEasy, `{"max_turns": "6"}`, "max_turns"},
		{"fractional max_turns", gtnEasy, `{"max_turns": 2.5}`, "max_turns"},
		{"zero max_turns", gtnEasy, `{"max_turns": 0}`, "max_turns"},
		{"negative max_turns", gtnHard, `{"max_turns": -3}`, "max_turns"},
		{"null max_turns with a fixed range", gtnEasy, `{"max_turns": null}`, "max_turns"},
		{"min above max", gtnAlias, `{"min_number": 9, "max_number": 3}`, "max_number"},
		{"bad bound type", gtnAlias, `{"min_number": true}`, "min_number"},
		{"bad type on the random id", gtnRandom, `{"max_number": "x"}`, "max_number"},
		{"too large", gtnAlias, `{"max_number": 1e40}`, "max_number"},
		{"not an object", gtnEasy, `[1]`, "object"},
		{"invalid json", gtnEasy, `{`, "object"},
	}
	wantBadOptions(t, tests)
}

func TestNewRNGDeterministic(t *testing.T) {
	a, b, c := NewRNG(42), NewRNG(42), NewRNG(43)
	differs := false
	for range 100 {
		x, y, z := a.Uint64(), b.Uint64(), c.Uint64()
		if x != y {
			t.Fatal("same seed gave different streams")
		}
		differs = differs || x != z
	}
	if !differs {
		t.Error("seeds 42 and 43 gave the same stream")
	}
}

// TestUniformIntBounds covers ranges whose width overflows int, and tiny ones.
func TestUniformIntBounds(t *testing.T) {
	const maxInt = int(^uint(0) >> 1)
	tests := []struct{ lo, hi, distinct int }{
		{1, 1, 1},
		{maxInt - 1, maxInt, 2},
		{-1, 1, 3},
		{0, maxInt, 0},
		{-maxInt - 1, maxInt, 0},
	}
	rng := NewRNG(3)
	for _, tt := range tests {
		seen := map[int]bool{}
		for range 200 {
			v := uniformInt(rng, tt.lo, tt.hi)
			if v < tt.lo || v > tt.hi {
				t.Fatalf("uniformInt(%d, %d) = %d", tt.lo, tt.hi, v)
			}
			seen[v] = true
		}
		if tt.distinct > 0 && len(seen) != tt.distinct {
			t.Errorf("uniformInt(%d, %d) hit %d values, want %d", tt.lo, tt.hi, len(seen), tt.distinct)
		}
	}
}
