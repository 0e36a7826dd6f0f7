package mathgrade_test

import (
	"strings"
	"testing"

	"github.com/rollfleet/rollfleet/envs/mathgrade"
)

func TestLastBoxed(t *testing.T) {
	cases := []struct {
		text, want string
		ok         bool
	}{
		{`The answer is \boxed{42}.`, `42`, true},
		{`\boxed{\frac{1}{2}}`, `\frac{1}{2}`, true},
		{`\boxed{a{b{c}}d}`, `a{b{c}}d`, true},
		{`first \boxed{1}, then \boxed{2}`, `2`, true},
		{`\boxed{1} and finally \fbox{3}`, `3`, true},
		{`\fbox{3} but then \boxed{4}`, `4`, true},
		{`\fbox{x+1}`, `x+1`, true},
		{`no box at all`, ``, false},
		{``, ``, false},
		{`\boxed{5`, ``, false},
		{`\boxed{5} then \boxed{6`, ``, false},
		{`\boxed{{5}`, ``, false},
		{`\boxed{}`, ``, true},
		{`\boxed{ 7 }`, `7`, true},
		{`\boxed {8}`, `8`, true},
		{`so $\boxed 5$.`, `5`, true},
		{`\boxed 12`, `12`, true},
		{`\boxed`, ``, false},
		{`\boxed.`, ``, false},
		{`\boxed{\{1,2\}}`, `\{1,2\}`, true},
		{`\boxed{\}}`, `\}`, true},
		{`\boxed{\}`, ``, false},
		{`\boxed{a \\ b}`, `a \\ b`, true},
		{`\boxed{\boxed{9}}`, `9`, true},
		{`\boxed{2} \boxedsymbol{3}`, `2`, true},
		{`\boxed{\text{(B)}}`, `\text{(B)}`, true},
		{"\\boxed{1\n+1}", "1\n+1", true},
	}
	for _, c := range cases {
		got, ok := mathgrade.LastBoxed(c.text)
		if got != c.want || ok != c.ok {
			t.Errorf("LastBoxed(%q) = %q, %v; want %q, %v", c.text, got, ok, c.want, c.ok)
		}
	}
}

// Hostile inputs must return quickly; the test timeout is the guard.
func TestHostileInputs(t *testing.T) {
	mb := 1 << 20
	inputs := []string{
		strings.Repeat("{", mb),
		`\boxed` + strings.Repeat("{", mb),
		strings.Repeat(`\boxed{`, mb/7),
		strings.Repeat(`\boxeda`, mb/7),
		strings.Repeat("(", mb),
		strings.Repeat("((", 4000) + "1" + strings.Repeat("))", 4000),
		strings.Repeat("{", 5000) + strings.Repeat("}", 5000),
		strings.Repeat(`\frac{`, 1500),
		strings.Repeat(`\frac{1}{`, 1000) + "2" + strings.Repeat("}", 1000),
		strings.Repeat(`\sqrt{`, 1500) + "2" + strings.Repeat("}", 1500),
		strings.Repeat("-", 10000) + "1",
		strings.Repeat("2^", 3000) + "2",
		`2^2^2^2^2^9999999`,
		`9^{9^{9^{9}}}`,
		`10^{1000}^{1000}`,
		`1e999999999999999999`,
		`2^{-99999999999999999999}`,
		strings.Repeat(`2^{1000}\cdot`, 700) + "1",
		strings.Repeat(`\binom{8192}{4096}+`, 500) + "1",
		strings.Repeat(`1000!+`, 1500) + "1",
		strings.Repeat(`\sqrt[997]{2^{999}}+`, 400) + "1",
		strings.Repeat(`\sqrt[3]{7^{999}}+`, 500) + "1",
		strings.Repeat(`(7/3)^{1000}+`, 700) + "1",
		`\{` + strings.Repeat("1,", 3000) + `1\}`,
		`\{` + strings.Repeat(`2^{999},`, 45) + `1\}`,
		strings.Repeat("x", 10000),
		strings.Repeat("x^x", 3000),
		strings.Repeat("(x+1)^{999}", 800),
		strings.Repeat(`\text{`, 2000) + "a" + strings.Repeat("}", 2000),
		strings.Repeat(`$`, 10000),
		strings.Repeat(`\boxed{`, 1400) + "1" + strings.Repeat("}", 1400),
		strings.Repeat(`\left(`, 1000) + "1" + strings.Repeat(`\right)`, 1000),
		strings.Repeat("1,", 5000),
		strings.Repeat(`\cup`, 2500),
		strings.Repeat(`\{`, 50) + "1" + strings.Repeat(`\}`, 50),
		strings.Repeat(`\{1,`, 33) + "1" + strings.Repeat(`\}`, 33),
		strings.Repeat("(", 60) + "1,2" + strings.Repeat("),1", 60),
		strings.Repeat("0.", 5000),
		`0.` + strings.Repeat("0", 9000) + "1",
		strings.Repeat("9", 10000),
		strings.Repeat(`0.\overline{9}`, 700),
	}
	for _, in := range inputs {
		mathgrade.LastBoxed(in)
		mathgrade.Normalize(in)
		mathgrade.Grade(in, "1")
		mathgrade.Grade(`\boxed{`+in+`}`, in)
		if mathgrade.Equivalent(in, "1") && len(in) > 1 {
			t.Errorf("Equivalent(%q, 1) = true", short(in))
		}
		mathgrade.Equivalent(in, in)
		mathgrade.Equivalent(in, in+"+1")
	}
}
