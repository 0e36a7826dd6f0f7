package messages

import (
	"math/rand/v2"
	"testing"
	"testing/quick"
)

func TestSubjects(t *testing.T) {
	for _, s := range []Subjects{NewSubjects(""), NewSubjects("rf"), {}} {
		for got, want := range map[string]string{
			s.Episodes("game:GuessTheNumber-v0"): "rf.episodes.game:GuessTheNumber-v0",
			s.Episodes("math.gsm8k"):             "rf.episodes.math%2Egsm8k",
			s.EpisodesAll():                      "rf.episodes.>",
			s.Generate():                         "rf.llm.generate",
			s.Tokenize():                         "rf.llm.tokenize",
			s.Steps("ep 1"):                      "rf.steps.ep%201",
			s.StepsAll():                         "rf.steps.>",
			s.Trajectories("qa"):                 "rf.trajectories.qa",
			s.TrajectoriesAll():                  "rf.trajectories.>",
			s.Groups("qa"):                       "rf.groups.qa",
			s.GroupsAll():                        "rf.groups.>",
			s.Failures(FailureMalformed):         "rf.failures.malformed",
			s.FailuresAll():                      "rf.failures.>",
			s.StreamEpisodes():                   "RF_EPISODES",
			s.StreamSteps():                      "RF_STEPS",
			s.StreamTrajectories():               "RF_TRAJECTORIES",
			s.StreamGroups():                     "RF_GROUPS",
			s.StreamFailures():                   "RF_FAILURES",
		} {
			if got != want {
				t.Errorf("Subjects%+v: got %q, want %q", s, got, want)
			}
		}
	}
	s := NewSubjects("team-1.rf_x")
	if got := s.Steps("e"); got != "team-1.rf_x.steps.e" {
		t.Errorf("custom prefix: %q", got)
	}
	if got := s.StreamTrajectories(); got != "TEAM-1_RF_X_TRAJECTORIES" {
		t.Errorf("custom prefix stream: %q", got)
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
