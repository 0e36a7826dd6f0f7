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
// behaviour it exercises. Verdict is NeMo Gym's reward, which the default
// options give; StrictVerdict, when set, is the reward under Strict. Kind is
// "match" (reward 1), "reject" (reward 0), "adversarial" (a wrong answer a
// lenient grader could reward; reward 0 in both modes) or "lenient" (a wrong
// answer NeMo Gym rewards: reward 1 by default, 0 under Strict).
type tableCase struct {
	Expected      string `json:"expected"`
	Response      string `json:"response"`
	Verdict       int    `json:"verdict"`
	Class         string `json:"class"`
	Kind          string `json:"kind"`
	Target        string `json:"target"`
	SourceNote    string `json:"source_note"`
	StrictVerdict *int   `json:"strict_verdict"`
}

// want is the case's reward under the given options.
func (c *tableCase) want(o mathgrade.Options) int {
	if o.Strict && c.StrictVerdict != nil {
		return *c.StrictVerdict
	}
	return c.Verdict
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
		strict := c.want(mathgrade.Options{Strict: true})
		ok := false
		switch c.Kind {
		case "match":
			ok = c.Verdict == 1 && strict == 1
		case "reject", "adversarial":
			ok = c.Verdict == 0 && strict == 0
		case "lenient":
			ok = c.Verdict == 1 && strict == 0
		}
		if !ok {
			t.Fatalf("line %d: verdict %d (strict %d) does not fit kind %q", n, c.Verdict, strict, c.Kind)
		}
		cases = append(cases, c)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return cases
}

// TestGradeTable grades every case of the table with the default options
// (NeMo Gym's behaviour) and with Strict, and reports per class how many
// agree. A reward where the mode's verdict is 0 is a false positive and
// fails the test; so does any disagreement.
func TestGradeTable(t *testing.T) {
	cases := loadTable(t)
	type count struct{ match, reject, adversarial, lenient, agree, agreeStrict int }
	perClass := map[string]*count{}
	falsePos := map[bool]int{}
	for _, c := range cases {
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
		case "adversarial":
			k.adversarial++
		default:
			k.lenient++
		}
		for _, o := range []mathgrade.Options{{}, {Strict: true}} {
			got := o.Grade(c.Response, c.Expected)
			want := c.want(o)
			if int(got.Reward) == want {
				if o.Strict {
					k.agreeStrict++
				} else {
					k.agree++
				}
				continue
			}
			what := "missed"
			if got.Reward == 1 {
				falsePos[o.Strict]++
				what = "FALSE POSITIVE"
			}
			t.Errorf("%s (strict %v) [%s/%s] %s\n  response %q\n  expected %q\n  extracted %q", what, o.Strict, c.Class, c.Target, c.SourceNote, c.Response, c.Expected, got.Extracted)
		}
	}
	classes := make([]string, 0, len(perClass))
	for cl := range perClass {
		classes = append(classes, cl)
	}
	sort.Strings(classes)
	var total count
	t.Logf("%-16s %6s %6s %6s %7s %6s %6s", "class", "match", "reject", "advers", "lenient", "agree", "strict")
	for _, cl := range classes {
		k := perClass[cl]
		t.Logf("%-16s %6d %6d %6d %7d %6d %6d", cl, k.match, k.reject, k.adversarial, k.lenient, k.agree, k.agreeStrict)
		total.match += k.match
		total.reject += k.reject
		total.adversarial += k.adversarial
		total.lenient += k.lenient
		total.agree += k.agree
		total.agreeStrict += k.agreeStrict
	}
	t.Logf("%-16s %6d %6d %6d %7d %6d %6d of %d", "total", total.match, total.reject, total.adversarial, total.lenient, total.agree, total.agreeStrict, len(cases))
	t.Logf("false positives: %d by default (agreement with NeMo Gym %d of %d), %d under Strict (which rejects the %d lenient cases NeMo Gym rewards)",
		falsePos[false], total.agree, len(cases), falsePos[true], total.lenient)
	if len(cases) < 600 || total.adversarial < 120 || total.lenient < 40 || len(perClass) < 20 {
		t.Errorf("table too small: %d cases, %d adversarial, %d lenient, %d classes", len(cases), total.adversarial, total.lenient, len(perClass))
	}
}
