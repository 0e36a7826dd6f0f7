package mathgrade_test

import (
	"strings"
	"testing"

	"github.com/rollfleet/rollfleet/envs/mathgrade"
)

// equivalentCases are checked in both orders: Equivalent is symmetric.
var equivalentCases = []struct {
	pred, expected string
	want           bool
}{
	// Integers: exact, any size.
	{`3`, `3`, true},
	{`3`, `3.0`, true},
	{`3`, `3.01`, false},
	{`10`, `100`, false},
	{`-5`, `5`, false},
	{`-5`, `-5`, true},
	{`007`, `7`, true},
	{`+5`, `5`, true},
	{`0`, `-0`, true},
	{`2`, `2.000`, true},
	{`3`, `2.9999999999`, true}, // rounds to 3 at six places; not under Strict
	{`3`, `2.999`, false},
	{`12345678901234567890123`, `12345678901234567890123.0`, true},
	{`12345678901234567890123`, `12345678901234567890124`, false},
	{`1000`, `1,000`, true},
	{`1,000,000`, `1000000`, true},
	{`1000`, `1{,}000`, true},
	{`1234`, `1\,234`, true},
	{`1,000`, `1`, false},
	{`42`, `24`, false},
	{`0`, `0.0`, true},

	// Decimals: rounded alike at six places against a number (exact under
	// Strict, see strictCases).
	{`0.5`, `\frac{1}{2}`, true},
	{`.5`, `0.5`, true},
	{`0.50`, `0.5`, true},
	{`-.5`, `-\frac12`, true},
	{`0.333`, `\frac{1}{3}`, false},
	{`0.3333333333`, `\frac{1}{3}`, true},
	{`0.3333`, `\frac{1}{3}`, false},
	{`0.333334`, `\frac{1}{3}`, false},
	{`0.0000005`, `0`, true},  // half rounds to even: 0.000000
	{`0.0000015`, `0`, false}, // 0.000002
	{`0.0000025`, `0.000002`, true},
	{`x + 0.333333`, `x + \frac13`, false}, // only numbers are rounded
	{`0.25`, `1/4`, true},
	{`1.5`, `3/2`, true},
	{`2.5`, `\dfrac{5}{2}`, true},
	{`0.1`, `0.10`, true},
	{`0.1`, `0.01`, false},
	{`0.125`, `\frac{1}{8}`, true},
	{`0.2`, `\frac{1}{4}`, false},
	{`-0.75`, `-\frac{3}{4}`, true},
	{`0.\overline{3}`, `\frac{1}{3}`, true},
	{`0.1\overline{6}`, `\frac16`, true},
	{`0.\overline{3}`, `0.333`, false},
	{`0.10\overline{6}`, `\frac{8}{75}`, true},
	{`1.\overline{142857}`, `\frac{8}{7}`, true},

	// Fractions.
	{`\frac{1}{2}`, `1/2`, true},
	{`1/2`, `2`, false},
	{`\frac{2}{4}`, `\frac{1}{2}`, true},
	{`\frac12`, `\frac{1}{2}`, true},
	{`\tfrac{3}{4}`, `0.75`, true},
	{`\frac{-1}{2}`, `-\frac{1}{2}`, true},
	{`-1/2`, `\frac{-1}{2}`, true},
	{`\frac{1}{2}`, `\frac{1}{3}`, false},
	{`\frac{6}{4}`, `\frac{3}{2}`, true},
	{`\frac{1}{0}`, `1`, false},
	{`\cfrac{1}{2}`, `0.5`, true},
	{`\frac{1}{2}`, `-\frac{1}{2}`, false},
	{`\frac{\frac{1}{2}}{\frac{3}{4}}`, `\frac{2}{3}`, true},
	{`\frac 1 2`, `0.5`, true},

	// Mixed numbers.
	{`1\frac{1}{2}`, `\frac{3}{2}`, true},
	{`1\frac{1}{2}`, `1.5`, true},
	{`1 1/2`, `3/2`, true},
	{`-1\frac{1}{2}`, `-1.5`, true},
	{`2\frac{1}{2}`, `1`, false},
	{`\frac{10}{3}`, `3\frac{1}{3}`, true},
	{`3\frac{1}{3}`, `3.333`, false},
	{`2\frac{\pi}{2}`, `\pi`, true},

	// Percentages: p% is p or p/100 against a plain number.
	{`50\%`, `0.5`, true},
	{`50\%`, `50`, true},
	{`50%`, `\frac{1}{2}`, true},
	{`0.5\%`, `50\%`, false},
	{`50\%`, `50\%`, true},
	{`25\%`, `0.25`, true},
	{`25\%`, `0.5`, false},
	{`12.5\%`, `\frac{1}{8}`, true},
	{`50 percent`, `0.5`, true},
	{`50`, `0.5`, false},
	{`5\%`, `0.5`, false},
	{`\text{50\%}`, `\frac12`, true},
	{`70A!%`, `0`, false},
	{`2x\%`, `\frac{x}{50}`, true},

	// Scientific notation.
	{`1.5e3`, `1500`, true},
	{`1.5\times10^{3}`, `1500`, true},
	{`1.5 \cdot 10^3`, `1.5e3`, true},
	{`2E-3`, `0.002`, true},
	{`1.5e3`, `150`, false},
	{`6.02\times10^{23}`, `602000000000000000000000`, true},
	{`1e-1000`, `10^{-1000}`, true},
	{`1e99999`, `1`, false},
	{`3 \times 10^8`, `300000000`, true},
	{`3 \times 10^8`, `3 \times 10^9`, false},

	// Square roots and other roots.
	{`\sqrt{8}`, `2\sqrt{2}`, true},
	{`\sqrt{8}`, `2\sqrt{3}`, false},
	{`\sqrt{4}`, `2`, true},
	{`\sqrt{\frac{1}{4}}`, `\frac{1}{2}`, true},
	{`\sqrt[3]{8}`, `2`, true},
	{`\sqrt[3]{-8}`, `-2`, true},
	{`\frac{\sqrt{3}}{2}`, `\frac{\sqrt3}{2}`, true},
	{`\frac{1}{\sqrt{2}}`, `\frac{\sqrt{2}}{2}`, true},
	{`3\sqrt{2}`, `\sqrt{18}`, true},
	{`\sqrt{2}+\sqrt{3}`, `\sqrt{3}+\sqrt{2}`, true},
	{`\sqrt{-1}`, `i`, false},
	{`2^{1/2}`, `\sqrt{2}`, true},
	{`8^{2/3}`, `4`, true},
	{`\sqrt{12}`, `2\sqrt{3}`, true},
	{`√2`, `\sqrt{2}`, true},
	{`\sqrt{2}`, `1.4142`, false},
	{`\sqrt{2}`, `1.41421356237`, true},
	{`\sqrt{2}`, `\sqrt{3}`, false},
	{`\sqrt{2}^2`, `2`, true},
	{`\sqrt[4]{16}`, `2`, true},
	{`\sqrt[3]{2}`, `2^{1/3}`, true},
	{`5\sqrt{5}`, `\sqrt{125}`, true},

	// Pi.
	{`2\pi`, `\pi*2`, true},
	{`2\pi`, `2 \pi`, true},
	{`\frac{\pi}{2}`, `\pi/2`, true},
	{`\frac{\pi}{2}`, `\frac{\pi}{3}`, false},
	{`π`, `\pi`, true},
	{`2\pi`, `6.283185307`, true},
	{`\pi`, `3.14`, false},
	{`\pi`, `3.14159265359`, true},
	{`\pi^2`, `9.8696`, false},
	{`\frac{2\pi}{3}`, `\frac{2}{3}\pi`, true},
	{`4\pi`, `2\pi`, false},
	{`\pi r^2`, `r^2\pi`, true},
	{`10\pi`, `\pi \cdot 10`, true},

	// Arithmetic expressions.
	{`2+3`, `5`, true},
	{`2*3`, `6`, true},
	{`2^{10}`, `1024`, true},
	{`2^10`, `1024`, true},
	{`(1+2)*3`, `9`, true},
	{`1+2*3`, `7`, true},
	{`-2^2`, `-4`, true},
	{`(-2)^2`, `4`, true},
	{`2^-1`, `0.5`, true},
	{`2^{-2}`, `\frac14`, true},
	{`10/4`, `2.5`, true},
	{`3!`, `6`, true},
	{`\binom{5}{2}`, `10`, true},
	{`\dbinom{6}{3}`, `20`, true},
	{`|-3|`, `3`, true},
	{`2(3+4)`, `14`, true},
	{`(2)(3)`, `6`, true},
	{`2\cdot 3`, `6`, true},
	{`6\div 4`, `1.5`, true},
	{`2^2^3`, `256`, true},
	{`\left(\frac{1}{2}\right)^2`, `\frac14`, true},
	{`1+1`, `3`, false},
	{`2^{1000}`, `4^{500}`, true},
	{`2-3`, `1`, false},
	{`\frac{1}{2}+\frac{1}{3}`, `\frac{5}{6}`, true},
	{`[2+3]`, `5`, true},

	// Expressions with variables: compared at sample points.
	{`2x+1`, `1+2x`, true},
	{`x^2+2x+1`, `(x+1)^2`, true},
	{`x^2-1`, `(x-1)(x+1)`, true},
	{`x^2`, `2x`, false},
	{`\frac{x}{2}`, `0.5x`, true},
	{`a+b`, `b+a`, true},
	{`2a`, `a2`, true},
	{`x+y`, `x-y`, false},
	{`\theta+1`, `1+\theta`, true},
	{`x_1+x_2`, `x_2+x_1`, true},
	{`y = 2x+3`, `2x+3`, true},
	{`3x`, `3y`, false},
	{`\frac{1}{x}+\frac{1}{y}`, `\frac{x+y}{xy}`, true},
	{`x^3`, `x^2`, false},
	{`2\sqrt{x}`, `\sqrt{4x}`, true},

	// Tuples and coordinates: ordered.
	{`(1, 2)`, `(1,2)`, true},
	{`(1,2)`, `(2,1)`, false},
	{`(1,2)`, `(1,2,3)`, false},
	{`\left(1, 2\right)`, `(1,2)`, true},
	{`(0.5, 1)`, `(\frac12, 1)`, true},
	{`(1,2)`, `1,2`, true},
	{`(-1, \sqrt{2})`, `(-1,\sqrt2)`, true},
	{`(1,2)`, `[1,2]`, false},
	{`(1,2),(3,4)`, `(3,4),(1,2)`, true},
	{`(1,-2)`, `(1,2)`, false},
	{`(x, y) = (1, 2)`, `(1,2)`, true},
	{`(x, y) = (1, 2)`, `(2,1)`, false},
	{`(2, \frac{\pi}{2})`, `(2,\pi/2)`, true},

	// Intervals: bracket types matter.
	{`[1,3)`, `[1,3]`, false},
	{`[1,3)`, `[1, 3)`, true},
	{`(-\infty, 2]`, `(−∞, 2]`, true},
	{`(-\infty,2]`, `(-\infty,2)`, false},
	{`(-\infty, 0) \cup (1, \infty)`, `(1,\infty)\cup(-\infty,0)`, true},
	{`(-\infty, 0) \cup (1, \infty)`, `(-\infty, 0) \cup [1, \infty)`, false},
	{`\mathbb{R}`, `(-\infty,\infty)`, true},
	{`x \in [1,2]`, `[1,2]`, true},
	{`[\frac{1}{2}, 3]`, `[0.5,3]`, true},
	{`(2,\infty)`, `(2, -\infty)`, false},
	{`[0, 1]`, `[0, 1)`, false},
	{`\left[ 2, 5 \right)`, `[2,5)`, true},
	{`(-\infty, -1]`, `(-\infty, 1]`, false},

	// Sets: unordered.
	{`\{1,2,3\}`, `\{3,2,1\}`, true},
	{`\{1,2,3\}`, `\{1,2\}`, false},
	{`\{1,2,3\}`, `1,2,3`, true},
	{`1, 2, 3`, `3, 2, 1`, true},
	{`\{1,2\}`, `\{1,2,4\}`, false},
	{`\emptyset`, `\varnothing`, true},
	{`\emptyset`, `\{\}`, true},
	{`\{\frac12, 2\}`, `\{2, 0.5\}`, true},
	{`\{5\}`, `5`, true},
	{`x=1, x=2`, `2, 1`, true},
	{`x=-3 \text{ or } x=5`, `\{5, -3\}`, true},
	{`1 and 2`, `2, 1`, true},
	{`-2, 2`, `2, -2`, true},
	{`\{1,2\}`, `(1,2)`, false},
	{`\left\{ -1, 1 \right\}`, `\{1,-1\}`, true},
	{`\emptyset`, `\{0\}`, false},
	{`\{\sqrt{2}, -\sqrt{2}\}`, `\pm\sqrt{2}`, true},
	{`\{\sqrt{2}\}`, `\pm\sqrt{2}`, false},

	// Matrices.
	{`\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}`, `\begin{bmatrix}1&2\\3&4\end{bmatrix}`, true},
	{`\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}`, `\begin{pmatrix}1&2\\4&3\end{pmatrix}`, false},
	{`\begin{pmatrix} \frac12 \\ 2 \end{pmatrix}`, `\begin{pmatrix}0.5\\2\end{pmatrix}`, true},

	// Multiple choice.
	{`B`, `(B)`, true},
	{`(B)`, `\text{(B)}`, true},
	{`\text{B}`, `B`, true},
	{`A`, `B`, false},
	{`(A)`, `(B)`, false},
	{`b`, `B`, true},
	{`\textbf{(C)}`, `C`, true},
	{`C`, `D`, false},
	{`\text{(A)}`, `\text{(E)}`, false},
	{`\mathrm{(D)}`, `D`, true},

	// Words and booleans.
	{`\text{Yes}`, `yes`, true},
	{`True`, `true`, true},
	{`\text{No}`, `Yes`, false},
	{`\text{even}`, `Even`, true},
	{`odd`, `even`, false},
	{`\text{Monday}`, `monday`, true},
	{`\text{no solution}`, `No Solution`, true},
	{`yes`, `sey`, false},
	{`False`, `0`, false},

	// Assignments.
	{`x = 5`, `5`, true},
	{`x=5`, `5.0`, true},
	{`k = 3`, `3`, true},
	{`x = 5`, `6`, false},
	{`\theta = 30^\circ`, `30`, true},
	{`a_1 = 4`, `4`, true},
	{`n = \frac{1}{2}`, `0.5`, true},

	// Units, delimiters and decorations.
	{`5\text{ cm}`, `5`, true},
	{`90^\circ`, `90`, true},
	{`90^{\circ}`, `90`, true},
	{`10 degrees`, `10`, true},
	{`\$5`, `5`, true},
	{`\$1,000`, `1000`, true},
	{`12\text{ inches}`, `12`, true},
	{`5 \text{ cm}^2`, `5`, true},
	{`100\text{ square units}`, `100`, true},
	{`$\frac{1}{2}$`, `0.5`, true},
	{`\(3\)`, `3`, true},
	{`\[3\]`, `3`, true},
	{`5.`, `5`, true},
	{`\boxed{5}`, `5`, true},
	{`\displaystyle\frac{1}{2}`, `0.5`, true},
	{`30°`, `30`, true},
	{`3 \text{ hours}`, `3`, true},
	{`\mathrm{5}`, `5`, true},
	{`7\mbox{ feet}`, `7`, true},
	{`\$4.50`, `4.5`, true},
	{`5\text{ cm}`, `6`, false},
	{`{5}`, `5`, true},
	{`\left\lvert -2 \right\rvert`, `2`, true},

	// Infinity.
	{`\infty`, `∞`, true},
	{`-\infty`, `\infty`, false},
	{`+\infty`, `\infty`, true},
	{`\infty`, `1000000`, false},

	// Empty and unparsable answers.
	{``, ``, false},
	{`   `, `5`, false},
	{`\sin x`, `\sin x`, true},
	{`\sin x`, `\cos x`, false},
	{`x^2 + y^2 = 1`, `x^2+y^2=1`, true},
	{`1.2.3`, `1.2.3`, true},
	{`1.2.3`, `6`, false},

	// Resource limits: bounded work, never equivalent unless textually identical.
	{`2^2^2^2^2^9999999`, `4`, false},
	{strings.Repeat("(", 5000) + "1" + strings.Repeat(")", 5000), `1`, false},
	{`10^{10000}`, `10^{10000}`, true},
	{`10^{10000}`, `10^{10001}`, false},
	{`2^{1001}`, `2 \cdot 2^{1000}`, false},
	{strings.Repeat("1+", 3000) + "1", `3001`, true},
	{strings.Repeat("1", 11000), strings.Repeat("1", 11000), false},
	{`9999999999^{999}`, `9999999999^{999}+1`, false},
	{`1000!`, `1000 \cdot 999!`, false},
	{`\sqrt[1000]{2^{1000}}`, `2`, true},
}

// strictCases are pairs NeMo Gym's verifier, and so the default options,
// take as equal and Strict does not: decimals that only round to the value,
// and an equation whose left side is not a label against its right-hand side.
var strictCases = []struct{ pred, expected string }{
	{`0.333333`, `\frac13`},
	{`1.414214`, `\sqrt2`},
	{`3.141593`, `\pi`},
	{`0.0000001`, `0`},
	{`-0.333333`, `-\frac{1}{3}`},
	{`33.3333\%`, `\frac13`},
	{`(0.333333, 1)`, `(\frac13, 1)`},
	{`[0.333333, 1)`, `[\frac13, 1)`},
	{`\{0.333333, 2\}`, `\{2, \frac13\}`},
	{`\begin{pmatrix}0.333333 & 1\end{pmatrix}`, `\begin{pmatrix}\frac13 & 1\end{pmatrix}`},
	{`2x+z=1`, `1`},
	{`2x=1`, `1`},
	{`a+b = 5+5+1 = 11`, `11`},
}

// Neither mode rewards a decimal that does not round to the value at six
// places, however close it is relatively: Strict requires both rules.
func TestRoundedLarge(t *testing.T) {
	for _, o := range []mathgrade.Options{{}, {Strict: true}} {
		if o.Equivalent(`3141592.6536`, `1000000\pi`) {
			t.Errorf("%+v: 3141592.6536 is 10^6 pi", o)
		}
		if !o.Equivalent(`3141592.653590`, `1000000\pi`) {
			t.Errorf("%+v: 3141592.653590 is not 10^6 pi", o)
		}
	}
}

// Under Strict the pairs of strictCases differ; both modes agree on the rest
// of equivalentCases, except the rounded ones marked there.
func TestStrict(t *testing.T) {
	strict := mathgrade.Options{Strict: true}
	for _, c := range strictCases {
		for _, ab := range [][2]string{{c.pred, c.expected}, {c.expected, c.pred}} {
			if !mathgrade.Equivalent(ab[0], ab[1]) || strict.Equivalent(ab[0], ab[1]) {
				t.Errorf("Equivalent(%q, %q) = %v, strict %v; want true, false", ab[0], ab[1], mathgrade.Equivalent(ab[0], ab[1]), strict.Equivalent(ab[0], ab[1]))
			}
		}
		resp := `so \boxed{` + c.pred + `}`
		if got, strictGot := mathgrade.Grade(resp, c.expected), strict.Grade(resp, c.expected); got.Reward != 1 || strictGot.Reward != 0 {
			t.Errorf("Grade(%q, %q) = %v, strict %v; want 1, 0", resp, c.expected, got.Reward, strictGot.Reward)
		}
	}
	// Grade reads only a predicted equation as its right-hand side, as
	// math_verify does ("we follow what the gold format is").
	if r := mathgrade.Grade(`so \boxed{1}`, `2x+z=1`); r.Reward != 0 {
		t.Errorf("an expected equation matched its right-hand side: %+v", r)
	}
	rounded := map[[2]string]bool{{`3`, `2.9999999999`}: true, {`0.3333333333`, `\frac{1}{3}`}: true, {`0.0000005`, `0`}: true, {`0.0000025`, `0.000002`}: true}
	for _, c := range equivalentCases {
		want := c.want && !rounded[[2]string{c.pred, c.expected}]
		if got := strict.Equivalent(c.pred, c.expected); got != want {
			t.Errorf("strict Equivalent(%q, %q) = %v, want %v", short(c.pred), short(c.expected), got, want)
		}
	}
}

func TestEquivalent(t *testing.T) {
	for _, c := range equivalentCases {
		if got := mathgrade.Equivalent(c.pred, c.expected); got != c.want {
			t.Errorf("Equivalent(%q, %q) = %v, want %v", short(c.pred), short(c.expected), got, c.want)
		}
		if got := mathgrade.Equivalent(c.expected, c.pred); got != c.want {
			t.Errorf("Equivalent(%q, %q) = %v, want %v (reversed)", short(c.expected), short(c.pred), got, c.want)
		}
	}
}

var gradeCases = []struct {
	response, expected string
	reward             float64
	extracted          string
	expectedOut        string
}{
	{`The answer is \boxed{5}.`, `5`, 1, `5`, `5`},
	{`\boxed{5}`, `$5$`, 1, `5`, `5`},
	{`The answer is 5.`, `5`, 0, ``, `5`},
	{`\boxed{}`, `5`, 0, ``, `5`},
	{`\boxed{1} then \boxed{2}`, `2`, 0, `1,2`, `2`},
	{`\boxed{1} then \boxed{2}`, `1,2`, 1, `1,2`, `1,2`},
	{`\boxed{1} was my first guess, but checking every case again carefully shows that it is \boxed{2}`, `2`, 1, `2`, `2`},
	{`\fbox{3}`, `3`, 0, ``, `3`},
	{`so $\boxed{\frac{1}{2}}$`, `\(0.5\)`, 1, `\frac{1}{2}`, `0.5`},
	{`hence $\boxed 5$.`, `5`, 0, ``, `5`},
	{`\boxed{5`, `5`, 0, ``, `5`},
	{`\boxed{(1,2)}`, `$(1, 2)$`, 1, `(1,2)`, `(1, 2)`},
	{`\boxed{x = 3}`, `3`, 1, `x = 3`, `3`},
	{`\boxed{\text{(B)}}`, `B`, 1, `\text{(B)}`, `B`},
	{`\boxed{50\%}`, `0.5`, 1, `50\%`, `0.5`},
	{`\boxed{\{1,2\}}`, `\{2,1\}`, 1, `\{1,2\}`, `\{2,1\}`},
	{`\boxed{[1,3)}`, `[1,3]`, 0, `[1,3)`, `[1,3]`},
	{`\boxed{ 1\frac{1}{2} }`, `$$\frac32$$`, 1, `1\frac{1}{2}`, `\frac32`},
	{`\boxed{\dfrac{\sqrt{8}}{2}}`, `\sqrt{2}`, 1, `\dfrac{\sqrt{8}}{2}`, `\sqrt{2}`},
	{`\boxed{3.01}`, `3`, 0, `3.01`, `3`},
	{`Final: \boxed{\boxed{7}}`, `7`, 1, `7`, `7`},
	{`\boxed{10}`, `100`, 0, `10`, `100`},
	{`\boxed{0.333}`, `\frac{1}{3}`, 0, `0.333`, `\frac{1}{3}`},
	{`\boxed{-5}`, `5`, 0, `-5`, `5`},
}

func TestGrade(t *testing.T) {
	for _, c := range gradeCases {
		got := mathgrade.Grade(c.response, c.expected)
		want := mathgrade.Result{Reward: c.reward, Extracted: c.extracted, Expected: c.expectedOut, Matched: c.reward == 1}
		if got != want {
			t.Errorf("Grade(%q, %q) = %+v, want %+v", c.response, c.expected, got, want)
		}
	}
}

func TestCaseCount(t *testing.T) {
	if n := len(equivalentCases) + len(gradeCases); n < 220 || len(equivalentCases) < 200 {
		t.Fatalf("%d equivalence cases and %d grade cases; want at least 200 and 220 in all", len(equivalentCases), n)
	}
}

func TestExtract(t *testing.T) {
	if _, err := mathgrade.Extract("no box here"); err != mathgrade.ErrNoAnswer {
		t.Errorf("no box: err = %v, want ErrNoAnswer", err)
	}
	if _, err := mathgrade.Extract(`\boxed{ }`); err != mathgrade.ErrNoAnswer {
		t.Errorf("empty box: err = %v, want ErrNoAnswer", err)
	}
	long := `\boxed{` + strings.Repeat("1", mathgrade.MaxAnswerLen+1) + `}`
	if ans, err := mathgrade.Extract(long); err != mathgrade.ErrTooLong || len(ans) != mathgrade.MaxAnswerLen+1 {
		t.Errorf("long box: len %d, err = %v, want ErrTooLong", len(ans), err)
	}
	if ans, err := mathgrade.Extract(`so \boxed{42}`); err != nil || ans != "42" {
		t.Errorf("Extract = %q, %v", ans, err)
	}
}

func short(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}
