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
		ab := mathgrade.Equivalent(a, b)
		if ba := mathgrade.Equivalent(b, a); ab != ba {
			t.Errorf("Equivalent(%q, %q) = %v but reversed %v", a, b, ab, ba)
		}
		if mathgrade.Normalize(a) != "" && !mathgrade.Equivalent(a, a) {
			t.Errorf("Equivalent(%q, itself) = false", a)
		}
		mathgrade.Grade(a, b)
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
