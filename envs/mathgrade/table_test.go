package mathgrade_test

import (
	"bufio"
	"encoding/json"
	"os"
	"sort"
	"testing"

	"github.com/rollfleet/rollfleet/envs/mathgrade"
)

// tableCase is one line of testdata/grade_cases.jsonl: a model response, the
// expected answer, and the reward NeMo Gym's math_with_judge library verifier
// gives (as derived from its source and math_verify's), with the class of
// behaviour it exercises. Kind is "match" (reward 1), "reject" (reward 0) or
// "adversarial" (a wrong answer a lenient grader could reward; reward 0).
type tableCase struct {
	Expected   string `json:"expected"`
	Response   string `json:"response"`
	Verdict    int    `json:"verdict"`
	Class      string `json:"class"`
	Kind       string `json:"kind"`
	Target     string `json:"target"`
	SourceNote string `json:"source_note"`
	// NemoVerdict is NeMo Gym's reward where rollfleet deliberately differs
	// (a rounded decimal rewarded by math_verify's float_rounding=6), else nil.
	NemoVerdict *int `json:"nemo_verdict"`
}

func loadTable(t testing.TB) []tableCase {
	f, err := os.Open("testdata/grade_cases.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cases []tableCase
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		var c tableCase
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("line %d: %v", n, err)
		}
		if c.Verdict != 0 && c.Verdict != 1 || c.Kind == "adversarial" && c.Verdict != 0 {
			t.Fatalf("line %d: bad verdict %d for kind %s", n, c.Verdict, c.Kind)
		}
		cases = append(cases, c)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return cases
}

// TestGradeTable grades every case of the table and reports, per class, how
// many agree with NeMo Gym. A reward on a case whose verdict is 0 is a false
// positive and fails the test; so does any disagreement.
func TestGradeTable(t *testing.T) {
	cases := loadTable(t)
	type count struct{ match, reject, adversarial, agree int }
	perClass := map[string]*count{}
	falsePos, differ := 0, 0
	for _, c := range cases {
		if c.NemoVerdict != nil && *c.NemoVerdict != c.Verdict {
			differ++
		}
		got := mathgrade.Grade(c.Response, c.Expected)
		k := perClass[c.Class]
		if k == nil {
			k = &count{}
			perClass[c.Class] = k
		}
		switch c.Kind {
		case "match":
			k.match++
		case "reject":
			k.reject++
		default:
			k.adversarial++
		}
		if int(got.Reward) == c.Verdict {
			k.agree++
			continue
		}
		if got.Reward == 1 {
			falsePos++
			t.Errorf("FALSE POSITIVE [%s/%s] %s\n  response %q\n  expected %q\n  extracted %q", c.Class, c.Target, c.SourceNote, c.Response, c.Expected, got.Extracted)
		} else {
			t.Errorf("missed [%s/%s] %s\n  response %q\n  expected %q\n  extracted %q", c.Class, c.Target, c.SourceNote, c.Response, c.Expected, got.Extracted)
		}
	}
	classes := make([]string, 0, len(perClass))
	for cl := range perClass {
		classes = append(classes, cl)
	}
	sort.Strings(classes)
	var total count
	t.Logf("%-16s %6s %6s %6s %6s", "class", "match", "reject", "advers", "agree")
	for _, cl := range classes {
		k := perClass[cl]
		t.Logf("%-16s %6d %6d %6d %6d", cl, k.match, k.reject, k.adversarial, k.agree)
		total.match += k.match
		total.reject += k.reject
		total.adversarial += k.adversarial
		total.agree += k.agree
	}
	t.Logf("%-16s %6d %6d %6d %6d of %d; false positives %d", "total", total.match, total.reject, total.adversarial, total.agree, len(cases), falsePos)
	t.Logf("NeMo Gym gives a different reward on %d cases by design (all adversarial, rewarded by NeMo Gym): agreement with NeMo Gym %d of %d",
		differ, len(cases)-differ, len(cases))
	if len(cases) < 500 || total.adversarial < 100 || len(perClass) < 20 {
		t.Errorf("table too small: %d cases, %d adversarial, %d classes", len(cases), total.adversarial, len(perClass))
	}
}
