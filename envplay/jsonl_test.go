package envplay

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/rollfleet/rollfleet/envs"
)

func newGame(t testing.TB) (envs.Env, string, envs.Info) {
	t.Helper()
	env, err := envs.New("game:GuessTheNumber-v0-easy", nil)
	if err != nil {
		t.Fatal(err)
	}
	obs, info := env.Reset(envs.NewRNG(1))
	if err := env.Restore(json.RawMessage(`{"game_number": 7}`)); err != nil {
		t.Fatal(err)
	}
	return env, obs, info
}

func TestJSONL(t *testing.T) {
	env, obs, info := newGame(t)
	in := strings.Join([]string{
		`"\\boxed{5}"`,
		`not json`,
		`{"action": "\\boxed{7}"}`,
		`"I say \\boxed{7}"`,
	}, "\n")
	var out bytes.Buffer
	if err := JSONL(strings.NewReader(in), &out, env, obs, info); !errors.Is(err, ErrBadLines) || !strings.Contains(err.Error(), ": 2 (first: line 2)") {
		t.Fatalf("two bad lines: %v, want ErrBadLines counting them", err)
	}
	text := out.String()
	sc := bufio.NewScanner(strings.NewReader(text))
	var lines []map[string]any
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("output line is not JSON: %q", sc.Text())
		}
		lines = append(lines, m)
	}
	if len(lines) != 5 {
		t.Fatalf("want reset + 4 lines, got %d", len(lines))
	}
	if lines[0]["observation"] != obs || lines[0]["info"].(map[string]any)["suffix"] != "Enter your next guess." {
		t.Fatalf("reset line: %v", lines[0])
	}
	if lines[1]["observation"] != "At turn 1, you guessed 5, and the target number is higher than 5." || lines[1]["reward"] != 0.0 {
		t.Fatalf("step line: %v", lines[1])
	}
	for _, i := range []int{2, 3} {
		if _, ok := lines[i]["error"]; !ok {
			t.Fatalf("line %d should report a bad input line: %v", i, lines[i])
		}
	}
	if lines[4]["observation"] != "Congratulations! You guessed the correct number 7 in 2 turns." ||
		lines[4]["reward"] != 1.0 || lines[4]["terminated"] != true {
		t.Fatalf("winning line: %v", lines[4])
	}
	if !strings.Contains(text, `\\boxed{}`) || strings.Contains(text, `\u003c`) {
		t.Fatalf("output should be plain JSON without HTML escapes: %s", text)
	}
}

// FuzzJSONL feeds arbitrary input lines: every line gets exactly one output
// line, and nothing panics.
func FuzzJSONL(f *testing.F) {
	for _, s := range []string{`"\\boxed{3}"`, `"x"` + "\n" + `"\\boxed{٣}"`, "\n\n", `{"a":1}`, `"\u0000"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		env, obs, info := newGame(t)
		var out bytes.Buffer
		if err := JSONL(strings.NewReader(in), &out, env, obs, info); err != nil && !errors.Is(err, ErrBadLines) {
			return // an over-long line; reported, not a crash
		}
		want := 1 + strings.Count(in, "\n")
		if in != "" && !strings.HasSuffix(in, "\n") {
			want++
		}
		if got := strings.Count(out.String(), "\n"); got != want {
			t.Fatalf("%d input lines gave %d output lines", want-1, got-1)
		}
	})
}
