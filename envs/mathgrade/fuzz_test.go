package mathgrade_test

import (
	"strings"
	"testing"

	"github.com/rollfleet/rollfleet/envs/mathgrade"
)

var fuzzSeeds = []string{
	`5`, `3.0`, `\frac{1}{2}`, `1\frac{1}{2}`, `50\%`, `1.5e3`, `1.5\times10^{3}`, `\sqrt{8}`,
	`2\sqrt{2}`, `\sqrt[3]{-8}`, `2\pi`, `(1, 2)`, `[1,3)`, `(-\infty, 2]`, `\{1,2,3\}`,
	`\text{(B)}`, `x = 5`, `x^2+2x+1`, `\begin{pmatrix}1&2\\3&4\end{pmatrix}`, `0.\overline{3}`,
	`2^2^2^2^2^9999999`, `((((((((1))))))))`, `\mathbb{R}`, `(-\infty,0)\cup(1,\infty)`,
	`\binom{5}{2}`, `5!`, `|-3|`, `\emptyset`, `1,000`, `5\text{ cm}`, `90^\circ`,
	`-793 < a < 10`, `(-793, 10)`, `x \geq 5`, `5 \leq x`, `2x+4y-3=0`, `y=-\frac12x+\frac34`,
	`AB=4, CD=5`, `(p,q)=(3,2)`, `f(x)=1`, `1 \pm \sqrt{19}`, `\sec^2 y`, `\tan^2 y + 1`,
	`\log_2 8`, `\sin^{-1} x`, `28 pct`, `1; 2`, `1or2`, `e^{\ln 3}`, `x = 5+5+1 = 11`,
	`0.333333`, `\frac13`, `2x+z=1`, `1`,
}

func FuzzEquivalent(f *testing.F) {
	for i, a := range fuzzSeeds {
		f.Add(a, fuzzSeeds[(i+1)%len(fuzzSeeds)])
		f.Add(a, a)
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		if len(a)+len(b) > 4096 {
			// Long inputs are covered by TestHostileInputs; here they only
			// make minimization slow.
			t.Skip()
		}
		for _, o := range []mathgrade.Options{{}, {Strict: true}} {
			ab := o.Equivalent(a, b)
			if ba := o.Equivalent(b, a); ab != ba {
				t.Errorf("%+v: Equivalent(%q, %q) = %v but reversed %v", o, a, b, ab, ba)
			}
			if mathgrade.Normalize(a) != "" && !o.Equivalent(a, a) {
				t.Errorf("%+v: Equivalent(%q, itself) = false", o, a)
			}
		}
		// Strict only takes rewards away. The answer is boxed, as a
		// response must be for Grade to read it at all.
		response := `\boxed{` + a + `}`
		if strict := (mathgrade.Options{Strict: true}).Grade(response, b).Reward; strict > mathgrade.Grade(response, b).Reward {
			t.Errorf("Grade(%q, %q) rewards under Strict only", response, b)
		}
	})
}

func FuzzLastBoxed(f *testing.F) {
	for _, s := range []string{
		`\boxed{5}`, `a \boxed{x{y}z} b \fbox{7}`, `\boxed 5$`, `\boxed{`, `\boxed{\}}`, `}{`, "",
		`\boxed{1} \boxed{\frac{1}{2}}`, strings.Repeat("{", 100),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 1<<16 {
			t.Skip()
		}
		got, ok := mathgrade.LastBoxed(s)
		if !ok && got != "" {
			t.Errorf("LastBoxed(%q) = %q with ok false", s, got)
		}
		if ok && !strings.Contains(s, got) {
			t.Errorf("LastBoxed(%q) = %q, not part of the input", s, got)
		}
		if ans, err := mathgrade.Extract(s); err == nil && (!strings.Contains(s, `\boxed{`) || strings.TrimSpace(ans) == "") {
			t.Errorf("Extract(%q) = %q without a boxed answer", s, ans)
		}
	})
}

func FuzzExtractAnswer(f *testing.F) {
	for _, s := range []string{
		`The final answer is $5$. I hope it is correct.`, `Final answer: the final answer is 12.`,
		`\boxed{(2, 2)} and \boxed{(6, 2)}`, `Answer: \(\frac{1}{2}\)`, `so $1$, $2$ and $3$`,
		`we get 1,234.5 and 50 percent`, `\[ x = 3 \]`, `answer is 3/4.`, `$$\boxed{1}$$ pct`,
		`the answer = 7`, "$\n$", `\boxed{`, `$`, `final answer is`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 1<<14 {
			t.Skip()
		}
		a, ok := mathgrade.ExtractAnswer(s)
		if ok != (a.Target != mathgrade.TargetNone) || ok && strings.TrimSpace(a.Text) == "" {
			t.Errorf("ExtractAnswer(%q) = %+v, %v", s, a, ok)
		}
		ans, err := mathgrade.Extract(s)
		if err == nil && (!strings.Contains(s, `\boxed{`) || strings.TrimSpace(ans) == "") {
			t.Errorf("Extract(%q) = %q without a boxed answer", s, ans)
		}
		if g := mathgrade.Grade(s, s); g.Reward == 1 && err != nil {
			t.Errorf("Grade(%q) rewarded without an answer", s)
		}
	})
}
