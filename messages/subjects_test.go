package messages

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/quick"
)

func TestSubjects(t *testing.T) {
	for _, s := range []Subjects{NewSubjects(""), NewSubjects("rf"), {}} {
		for got, want := range map[string]string{
			s.Episodes("run-1", "game:GuessTheNumber-v0"): "rf.episodes.run-1.game:GuessTheNumber-v0",
			s.Episodes("run-1", "math.gsm8k"):             "rf.episodes.run-1.math%2Egsm8k",
			s.Episodes("", "qa"):                          "rf.episodes.%.qa",
			s.Episodes("a.b", "qa"):                       "rf.episodes.a%2Eb.qa",
			s.EpisodesFilter("run-1", "qa"):               "rf.episodes.run-1.qa",
			s.EpisodesFilter(AnyRun, "qa"):                "rf.episodes.*.qa",
			s.EpisodesFilter(AnyRun, "math.gsm8k"):        "rf.episodes.*.math%2Egsm8k",
			s.EpisodesFilter("", "qa"):                    "rf.episodes.%.qa",
			s.EpisodesOfRun("run-1"):                      "rf.episodes.run-1.>",
			s.EpisodesOfRun(""):                           "rf.episodes.%.>",
			s.EpisodesAll():                               "rf.episodes.>",
			s.Generate():                                  "rf.llm.generate",
			s.Tokenize():                                  "rf.llm.tokenize",
			s.Steps("run-1", "g", "ep 1"):                 "rf.steps.run-1.0.2.6.6.ep%201",
			s.Steps("", "g", "ep"):                        "rf.steps.%.0.2.6.6.ep",
			s.StepsOfShard(0, 1):                          "rf.steps.>",
			s.StepsOfShard(1, 2):                          "rf.steps.*.1.>",
			s.StepsOfShard(3, 4):                          "rf.steps.*.*.3.>",
			s.StepsOfShard(5, 16):                         "rf.steps.*.*.*.*.5.>",
			s.StepsOfEpisode("run-1", "ep 1"):             "rf.steps.run-1.*.*.*.*.ep%201",
			s.StepsAll():                                  "rf.steps.>",
			s.Trajectories("run-1", "qa"):                 "rf.trajectories.run-1.qa",
			s.Trajectories("", "qa"):                      "rf.trajectories.%.qa",
			s.TrajectoriesOfRun("run-1"):                  "rf.trajectories.run-1.>",
			s.TrajectoriesAll():                           "rf.trajectories.>",
			s.Groups("run-1", "qa"):                       "rf.groups.run-1.qa",
			s.GroupsOfRun("run 1"):                        "rf.groups.run%201.>",
			s.GroupsAll():                                 "rf.groups.>",
			s.Failures("run-1", FailureMalformed):         "rf.failures.run-1.malformed",
			s.Failures("", FailureMalformed):              "rf.failures.%.malformed",
			s.FailuresOfRun("run-1"):                      "rf.failures.run-1.>",
			s.FailuresAll():                               "rf.failures.>",
			s.StreamEpisodes():                            "RF_EPISODES",
			s.StreamSteps():                               "RF_STEPS",
			s.StreamTrajectories():                        "RF_TRAJECTORIES",
			s.StreamGroups():                              "RF_GROUPS",
			s.StreamFailures():                            "RF_FAILURES",
		} {
			if got != want {
				t.Errorf("Subjects%+v: got %q, want %q", s, got, want)
			}
		}
	}
	s := NewSubjects("team-1.rf_x")
	if got := s.Steps("r", "g", "e"); got != "team-1.rf_x.steps.r.0.2.6.6.e" {
		t.Errorf("custom prefix: %q", got)
	}
	if got := s.StreamTrajectories(); got != "TEAM-1_RF_X_TRAJECTORIES" {
		t.Errorf("custom prefix stream: %q", got)
	}
}

// A run id "*" is a run of its own, not the wildcard: only AnyRun in a filter matches every run.
func TestAnyRunIsNoRunID(t *testing.T) {
	s := NewSubjects("")
	if got := s.Episodes(AnyRun, "qa"); got != "rf.episodes.%2A.qa" {
		t.Errorf("Episodes(%q) = %q: a run id must never become a wildcard", AnyRun, got)
	}
	for got, want := range map[string]string{
		s.Steps(AnyRun, "g", "e"):           "rf.steps.%2A.0.2.6.6.e",
		s.Trajectories(AnyRun, "qa"):        "rf.trajectories.%2A.qa",
		s.Groups(AnyRun, "qa"):              "rf.groups.%2A.qa",
		s.Failures(AnyRun, FailureEpisode):  "rf.failures.%2A.episode",
		s.EpisodesOfRun(AnyRun):             "rf.episodes.%2A.>",
		s.TrajectoriesOfRun(AnyRun):         "rf.trajectories.%2A.>",
		s.GroupsOfRun(AnyRun):               "rf.groups.%2A.>",
		s.FailuresOfRun(AnyRun):             "rf.failures.%2A.>",
		s.EpisodesFilter("%2A", "qa"):       "rf.episodes.%252A.qa",
		s.EpisodesFilter(AnyRun+"x", "qa"):  "rf.episodes.%2Ax.qa",
		s.EpisodesFilter(AnyRun, "*"):       "rf.episodes.*.%2A",
		s.EpisodesFilter(AnyRun, "a>"):      "rf.episodes.*.a%3E",
		s.EpisodesFilter(AnyRun, "run-1.x"): "rf.episodes.*.run-1%2Ex",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}

// subjectMatches reports whether a literal subject matches a filter with NATS's wildcards.
func subjectMatches(filter, subject string) bool {
	f, s := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, tok := range f {
		switch {
		case tok == ">":
			return len(s) > i
		case i >= len(s):
			return false
		case tok != "*" && tok != s[i]:
			return false
		}
	}
	return len(f) == len(s)
}

// The run filters match exactly the subjects of their run, and AnyRun those of every run.
func TestRunFiltersMatch(t *testing.T) {
	s := NewSubjects("")
	runs := []string{"", "run-1", "run-2", "a.b", "*", ">", "%", "run-1.qa"}
	envs := []string{"qa", "game:Sudoku-v0", "math.gsm8k", "*", ""}
	for _, run := range runs {
		for _, other := range runs {
			for _, env := range envs {
				same := run == other
				for _, c := range []struct {
					name            string
					filter, subject string
					want            bool
				}{
					{"EpisodesFilter", s.EpisodesFilter(run, env), s.Episodes(other, env), same},
					{"EpisodesFilter(AnyRun)", s.EpisodesFilter(AnyRun, env), s.Episodes(other, env), true},
					{"EpisodesFilter(AnyRun) other env", s.EpisodesFilter(AnyRun, env), s.Episodes(other, env+"x"), false},
					{"EpisodesOfRun", s.EpisodesOfRun(run), s.Episodes(other, env), same},
					{"TrajectoriesOfRun", s.TrajectoriesOfRun(run), s.Trajectories(other, env), same},
					{"GroupsOfRun", s.GroupsOfRun(run), s.Groups(other, env), same},
					{"FailuresOfRun", s.FailuresOfRun(run), s.Failures(other, env), same},
					{"EpisodesAll", s.EpisodesAll(), s.Episodes(other, env), true},
					{"StepsAll", s.StepsAll(), s.Steps(other, env, env), true},
					{"StepsOfShard", s.StepsOfShard(StepSlot(env)%4, 4), s.Steps(other, env, env), true},
					{"StepsOfEpisode", s.StepsOfEpisode(run, env), s.Steps(other, run, env), same},
					{"TrajectoriesAll", s.TrajectoriesAll(), s.Trajectories(other, env), true},
					{"GroupsAll", s.GroupsAll(), s.Groups(other, env), true},
					{"FailuresAll", s.FailuresAll(), s.Failures(other, env), true},
					{"TrajectoriesOfRun vs groups", s.TrajectoriesOfRun(run), s.Groups(other, env), false},
				} {
					if run == AnyRun && c.name == "EpisodesFilter" {
						continue // AnyRun is the wildcard here, checked on its own line
					}
					if got := subjectMatches(c.filter, c.subject); got != c.want {
						t.Errorf("%s: %q matches %q: %v, want %v (run %q, other %q)", c.name, c.filter, c.subject, got, c.want, run, other)
					}
				}
			}
		}
	}
}

func TestParseSteps(t *testing.T) {
	for _, s := range []Subjects{NewSubjects(""), NewSubjects("team-1.rf_x")} {
		for _, run := range []string{"", "run-1", "a.b", "*", "%", "run 1/é"} {
			for _, ep := range []string{"", "ep-0001", "math.gsm8k/17 #2", ">", "%2E"} {
				group := run + "/" + ep
				gotRun, slot, gotEp, err := s.ParseSteps(s.Steps(run, group, ep))
				if err != nil || gotRun != run || gotEp != ep || slot != StepSlot(group) {
					t.Errorf("ParseSteps(Steps(%q, %q, %q)) = %q, %d, %q, %v", run, group, ep, gotRun, slot, gotEp, err)
				}
			}
		}
	}
	s := NewSubjects("")
	for _, bad := range []string{
		"", "rf.steps", "rf.steps.", "rf.steps.ep", "rf.steps..ep", "rf.steps.run.", "rf.steps.r.ep",
		"rf.steps.r.a.b", "rf.steps.r.1.3.7.15.a b", "rf.steps.r%.1.3.7.15.ep", "rf.steps.r.1.3.7.15.%2e",
		"rf.episodes.r.1.3.7.15.ep", "rg.steps.r.1.3.7.15.ep", "x.rf.steps.r.1.3.7.15.ep", "rf.stepsx.r.1.3.7.15.ep",
		"team-1.rf_x.steps.r.1.3.7.15.ep", "rf.steps.r.1.ep", "rf.steps.r.1.3.7.15.a.b",
		// Slots that Steps never writes: out of range, other spellings, levels that disagree.
		"rf.steps.r.0.0.0.16.ep", "rf.steps.r.1.1.1.-1.ep", "rf.steps.r.1.3.7.015.ep", "rf.steps.r.1.3.7.+15.ep",
		"rf.steps.r.1.3.7..ep", "rf.steps.r.0.3.7.15.ep", "rf.steps.r.1.1.7.15.ep", "rf.steps.r.1.3.3.15.ep",
		"rf.steps.r.*.*.*.*.ep",
	} {
		if run, slot, ep, err := s.ParseSteps(bad); err == nil {
			t.Errorf("ParseSteps(%q) = %q, %d, %q: want an error", bad, run, slot, ep)
		}
	}
	if _, _, _, err := NewSubjects("a.b").ParseSteps("rf.steps.r.1.3.7.15.e"); err == nil {
		t.Error("ParseSteps accepted another prefix's subject")
	}
	// A bad slot or episode still names the run, whose failure record goes on its subjects.
	if run, _, _, err := s.ParseSteps("rf.steps.r.1.3.7.99.e"); err == nil || run != "r" {
		t.Errorf("bad slot: run %q, %v", run, err)
	}
}

// Every slot is used, a group's episodes share one, and the shards of each count split the
// subjects: each subject in exactly one shard's filter.
func TestStepSlots(t *testing.T) {
	s := NewSubjects("")
	used := make([]int, MaxStepShards)
	for g := range 1600 {
		group := fmt.Sprintf("run-7-g%06d", g)
		slot := StepSlot(group)
		used[slot]++
		for i := range 4 {
			subject := s.Steps("run-7", group, fmt.Sprintf("run-7-%06d", 4*g+i))
			for count := 1; count <= MaxStepShards; count *= 2 {
				for index := range count {
					if got := subjectMatches(s.StepsOfShard(index, count), subject); got != (slot%count == index) {
						t.Fatalf("%q matches shard %d of %d: %v (its slot is %d)", subject, index, count, got, slot)
					}
				}
			}
		}
	}
	for slot, n := range used {
		// 100 groups a slot on average; a fair hash leaves none far off.
		if n < 60 || n > 140 {
			t.Errorf("slot %d has %d of 1600 groups", slot, n)
		}
	}
	for _, bad := range [][2]int{{0, 0}, {0, 3}, {2, 2}, {-1, 2}, {0, 32}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("StepsOfShard(%d, %d) did not panic", bad[0], bad[1])
				}
			}()
			s.StepsOfShard(bad[0], bad[1])
		}()
	}
}

func TestParseStepsProperties(t *testing.T) {
	s := NewSubjects("")
	roundTrips := func(run, group, ep string) bool {
		subject := s.Steps(run, group, ep)
		gotRun, slot, gotEp, err := s.ParseSteps(subject)
		return err == nil && gotRun == run && gotEp == ep && slot == StepSlot(group) && strings.Count(subject, ".") == 7
	}
	if err := quick.Check(roundTrips, &quick.Config{MaxCount: 20000}); err != nil {
		t.Error(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	seen := map[string][2]string{}
	for range 50000 {
		run, ep := randomID(r), randomID(r)
		if !roundTrips(run, run, ep) {
			t.Fatalf("Steps(%q, %q, %q) = %q does not round-trip", run, run, ep, s.Steps(run, run, ep))
		}
		subject := s.Steps(run, run, ep)
		if prev, ok := seen[subject]; ok && prev != [2]string{run, ep} {
			t.Fatalf("%q and %q share subject %q", prev, [2]string{run, ep}, subject)
		}
		seen[subject] = [2]string{run, ep}
	}
}

// validName reports whether name is usable as a JetStream consumer name and a file name: non-empty
// printable ASCII without '.', '*', '>', path separators or whitespace.
func validName(name string) bool {
	return validToken(name) && !strings.ContainsAny(name, `/\`)
}

func TestNameToken(t *testing.T) {
	for in, want := range map[string]string{
		"run-1":                  "run-1",
		"chaos-00000000deadbeef": "chaos-00000000deadbeef",
		"gateway":                "gateway",
		"A_b:c@d!":               "A_b:c@d!",
		strings.Repeat("x", 32):  strings.Repeat("x", 32),
	} {
		if got := NameToken(in); got != want {
			t.Errorf("NameToken(%q) = %q, want %q", in, got, want)
		}
	}
	hashed := []string{"", "a.b", "a b", "a*", "a>", "a/b", `a\b`, "a%b", "é", "\x00", strings.Repeat("x", 33)}
	seen := map[string]string{}
	for _, in := range hashed {
		got := NameToken(in)
		if len(got) != 16 || strings.Trim(got, "0123456789abcdef") != "" {
			t.Errorf("NameToken(%q) = %q, want a 16-digit hex hash", in, got)
		}
		if NameToken(in) != got {
			t.Errorf("NameToken(%q) is not deterministic", in)
		}
		if prev, ok := seen[got]; ok {
			t.Errorf("NameToken(%q) = NameToken(%q) = %q", in, prev, got)
		}
		seen[got] = in
	}
	valid := func(s string) bool { return validName(NameToken(s)) }
	if err := quick.Check(valid, &quick.Config{MaxCount: 20000}); err != nil {
		t.Error(err)
	}
	r := rand.New(rand.NewPCG(5, 6))
	for range 20000 {
		if id := randomID(r); !valid(id) {
			t.Fatalf("NameToken(%q) = %q is not a valid name", id, NameToken(id))
		}
	}
}

func TestValidatePrefix(t *testing.T) {
	for _, ok := range []string{"rf", "a.b.c", "Team-1_x"} {
		if err := ValidatePrefix(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".rf", "rf.", "a..b", "r f", "rf.*", "rf.>", "rf\t", "é", "a/b"} {
		if err := ValidatePrefix(bad); err == nil {
			t.Errorf("%q: want an error", bad)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("NewSubjects accepted an invalid prefix")
		}
	}()
	NewSubjects("rf.*")
}

func TestToken(t *testing.T) {
	for in, want := range map[string]string{
		"":                "%",
		"ep-0001":         "ep-0001",
		"a.b":             "a%2Eb",
		"*":               "%2A",
		">":               "%3E",
		"100%":            "100%25",
		"%":               "%25",
		"a b\tc\n":        "a%20b%09c%0A",
		"\x00\x7f":        "%00%7F",
		"é":               "%C3%A9",
		"game:Sudoku/v0!": "game:Sudoku/v0!",
	} {
		if got := Token(in); got != want {
			t.Errorf("Token(%q) = %q, want %q", in, got, want)
		}
		if back, err := ParseToken(want); err != nil || back != in {
			t.Errorf("ParseToken(%q) = %q, %v; want %q", want, back, err, in)
		}
	}
}

// validToken reports whether tok can stand as one NATS subject token in every client and tool:
// non-empty printable ASCII without separators or wildcards.
func validToken(tok string) bool {
	if tok == "" {
		return false
	}
	for i := 0; i < len(tok); i++ {
		if c := tok[i]; c <= ' ' || c >= 0x7f || c == '.' || c == '*' || c == '>' {
			return false
		}
	}
	return true
}

// randomID mixes the bytes Token must escape with ordinary ones, so collisions would show.
func randomID(r *rand.Rand) string {
	const alphabet = "ab.%*> \t\x00\x7f\xff\xc3\xa9-_:/2E"
	b := make([]byte, r.IntN(8))
	for i := range b {
		b[i] = alphabet[r.IntN(len(alphabet))]
	}
	return string(b)
}

func TestTokenProperties(t *testing.T) {
	// Any string: the token is valid and decodes back (so Token is injective).
	roundTrips := func(s string) bool {
		tok := Token(s)
		back, err := ParseToken(tok)
		return validToken(tok) && err == nil && back == s
	}
	if err := quick.Check(roundTrips, &quick.Config{MaxCount: 20000}); err != nil {
		t.Error(err)
	}
	// Short strings over a hostile alphabet: no two share a token.
	r := rand.New(rand.NewPCG(1, 2))
	seen := map[string]string{}
	for range 50000 {
		s := randomID(r)
		if !roundTrips(s) {
			t.Fatalf("%q: token %q does not round-trip", s, Token(s))
		}
		if prev, ok := seen[Token(s)]; ok && prev != s {
			t.Fatalf("%q and %q share token %q", prev, s, Token(s))
		}
		seen[Token(s)] = s
	}
}

func TestTokenDoesNotAllocateWhenClean(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { _ = Token("ep-0001") }); n != 0 {
		t.Errorf("Token allocates %v times for a clean id", n)
	}
}

func TestParseTokenRejectsNonCanonical(t *testing.T) {
	for _, bad := range []string{"", "a.b", "a b", "%%", "%2", "%2e", "%41", "%ZZ", "a%", "é"} {
		if got, err := ParseToken(bad); err == nil {
			t.Errorf("ParseToken(%q) = %q, want an error", bad, got)
		}
	}
}

func TestMsgIDs(t *testing.T) {
	if got := StepMsgID("ep/1", "r9", 12); got != "ep/1/r9/12" {
		t.Errorf("StepMsgID = %q", got)
	}
	if got := TrajectoryMsgID("ep/1"); got != "ep/1" {
		t.Errorf("TrajectoryMsgID = %q", got)
	}
}
