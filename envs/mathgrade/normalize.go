package mathgrade

import (
	"regexp"
	"strings"
)

// Normalize rewrites an answer into a canonical string the way GEM's
// strip_string and NeMo Gym's answer clean-up do, so that answers differing
// only in presentation compare equal as strings:
//
//   - outer \(…\), \[…\], $…$, $$…$$ and a whole-answer \boxed{…} are removed;
//   - \text{…}, \textbf{…}, \mathrm{…}, \mbox{…} and similar keep only their
//     content, and a trailing unit such as "\text{ cm}", "degrees" or
//     "square units" after a number is dropped;
//   - \left, \right, \!, \,, \;, \:, \quad, \$, $, %, \%, ^\circ and ^{\circ}
//     are removed; \dfrac, \tfrac and \cfrac become \frac;
//   - \frac12 becomes \frac{1}{2} and \sqrt2 becomes \sqrt{2};
//   - a whole answer "a/b" of integers becomes \frac{a}{b}, "1 1/2" becomes
//     1\frac{1}{2}, and "1,000" loses its thousands separators;
//   - ".5" becomes "0.5", "3.0" becomes "3" and "2.50" becomes "2.5";
//   - "x = 5" (one variable assigned on the left) becomes "5", and " or " and
//     " and " between answers become commas;
//   - spaces and a trailing period are removed.
//
// Letter case is kept; [Equivalent] ignores it. An answer longer than
// [MaxAnswerLen] normalizes to "", which is never equivalent to anything.
func Normalize(answer string) string {
	return normalize(answer, false)
}

// normalize is [Normalize]; with keepRel it keeps a labelled left-hand side
// ("x = 5" stays "x=5") for the relation rules of [Equivalent].
func normalize(answer string, keepRel bool) string {
	if len(answer) > MaxAnswerLen {
		return ""
	}
	s := unicodeReplacer.Replace(answer)
	s = strings.TrimSpace(s)
	s = stripDelims(s)
	s = strings.TrimRight(s, ". ")
	s = degreeReplacer.Replace(s)
	s = operatorNameRe.ReplaceAllString(s, `\$1 `)
	s = rewriteCommands(s)
	s = stripUnitText(s)
	s = unwrapText(s)
	s = percentWordRe.ReplaceAllString(s, "")
	s = bareFuncRe.ReplaceAllString(s, `$1\$2$3`)
	s = strings.NewReplacer("$", "", "%", "", "{,}", ",", ";", ",").Replace(s)
	s = strings.TrimSpace(s)
	s = stripDelims(s)
	s = strings.TrimRight(s, ". ")
	s = stripUnitWords(s)
	s = orAndRe.ReplaceAllStringFunc(s, orAnd)
	if !keepRel {
		s = stripAssignment(s)
	}
	s = strings.TrimSpace(s)
	if m := mixedSpaceRe.FindStringSubmatch(s); m != nil {
		s = m[1] + `\frac{` + m[2] + "}{" + m[3] + "}"
	}
	if thousandsRe.MatchString(s) {
		s = strings.ReplaceAll(s, ",", "")
	}
	s = squeezeSpaces(s)
	s = fixArgs(s, 0)
	if m := slashRe.FindStringSubmatch(s); m != nil {
		s = m[1] + `\frac{` + m[2] + "}{" + m[3] + "}"
	}
	s = fixDecimals(s)
	s = stripOuterBraces(s)
	s = strings.TrimRight(s, ".")
	return s
}

var (
	unicodeReplacer = strings.NewReplacer(
		"\u2212", "-", "\u2013", "-", "\u00d7", `\times `, "\u00b7", `\cdot `, "\u22c5", `\cdot `,
		"\u00f7", `\div `, "\u03c0", `\pi `, "\u221e", `\infty `, "\u221a", `\sqrt `,
		"\u00b0", "", "\u211d", `\mathbb{R}`, "\u222a", `\cup `, "\u2205", `\emptyset `,
		"\u00a0", " ", "\u2009", " ", "\u202f", " ", "\r", " ", "\n", " ", "\t", " ",
		"\uff0c", ",",
	)
	degreeReplacer = strings.NewReplacer(`^{\circ}`, "", `^\circ`, "", `{}^\circ`, "", `\degree`, "")

	// A number, then a unit word (optionally squared or cubed) at the end.
	unitWordRe = regexp.MustCompile(`(?i)[0-9}\)]\s*(?:(?:square|sq\.?|cubic|cu\.?)\s*)?` +
		`(?:units?|cm|mm|km|centimet(?:er|re)s?|millimet(?:er|re)s?|kilomet(?:er|re)s?|met(?:er|re)s?|` +
		`inch(?:es)?|foot|feet|ft|yards?|yd|miles?|degrees?|deg|radians?|seconds?|secs?|minutes?|mins?|` +
		`hours?|hrs?|days?|weeks?|months?|years?|grams?|kg|kilograms?|pounds?|lbs?|ounces?|oz|` +
		`lit(?:er|re)s?|ml|gallons?|dollars?|cents?|percent|mph|km/h|m/s)\s*(?:\^\{?[23]\}?)?$`)
	// Content of a trailing \text{…} that is a unit, such as " cm" or "m/s^2".
	unitTextRe = regexp.MustCompile(`^\s*[A-Za-z][A-Za-z\s./]*(?:\^\{?[0-9]\}?)?\s*$`)
	// One variable (letter, Greek letter, optionally subscripted) assigned on the left.
	assignRe = regexp.MustCompile(`^\s*(?:[A-Za-z]|\\(?:alpha|beta|gamma|delta|theta|lambda|mu|phi|varphi|psi|omega|rho|sigma|tau))` +
		`(?:_\{?[A-Za-z0-9]+\}?)?\s*(?:=|\\in\b)\s*`)
	// "x=1 or x=2", "1 and 2" and "1or2" list their answers: "or" and "and"
	// not touching other letters (latex2sympy2_extended's and_or rule).
	orAndRe = regexp.MustCompile(`,?\s*[A-Za-z\\]*(?:or|and)[A-Za-z]*\s*`)
	// \operatorname{sin} is \sin.
	operatorNameRe = regexp.MustCompile(`\\operatorname\*?\{([A-Za-z]+)\}`)
	// "percent", "percentage" and "pct" are percent signs.
	percentWordRe = regexp.MustCompile(`(?i)\s*\b(?:percentage|percent|pct)\b`)
	// Function names written without a backslash: "sin(x)", "log^2(x)".
	bareFuncRe   = regexp.MustCompile(`(^|[^A-Za-z\\])(sin|cos|tan|sec|csc|cot|arcsin|arccos|arctan|sinh|cosh|tanh|ln|log|exp)(\s*[(^])`)
	mixedSpaceRe = regexp.MustCompile(`^(-?\d+)\s+(\d+)\s*/\s*(\d+)$`)
	thousandsRe  = regexp.MustCompile(`^[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?$`)
	slashRe      = regexp.MustCompile(`^(-?)(\d+)/(\d+)$`)
)

// orAnd turns a match of orAndRe into a comma when its word is exactly "or"
// or "and", and keeps it otherwise.
func orAnd(m string) string {
	w := strings.TrimSpace(strings.TrimPrefix(m, ","))
	if w == "or" || w == "and" {
		return ","
	}
	return m
}

// delimPairs are outer math delimiters removed from whole answers.
var delimPairs = [...][2]string{{`\(`, `\)`}, {`\[`, `\]`}, {"$$", "$$"}, {"$", "$"}}

// stripDelims removes outer math delimiters and whole-answer \boxed{…} or
// \fbox{…} wrappers, repeatedly.
func stripDelims(s string) string {
	for {
		t := strings.TrimSpace(s)
		for _, p := range delimPairs {
			if len(t) >= len(p[0])+len(p[1]) && strings.HasPrefix(t, p[0]) && strings.HasSuffix(t, p[1]) {
				t = strings.TrimSpace(t[len(p[0]) : len(t)-len(p[1])])
				break
			}
		}
		for _, cmd := range [...]string{`\boxed`, `\fbox`} {
			if !strings.HasPrefix(t, cmd) {
				continue
			}
			k := len(cmd)
			for k < len(t) && isSpace(t[k]) {
				k++
			}
			if k < len(t) && t[k] == '{' && matchBrace(t, k) == len(t)-1 {
				t = strings.TrimSpace(t[k+1 : len(t)-1])
			}
		}
		if t == s {
			return t
		}
		s = t
	}
}

// commandRewrites maps LaTeX command names to their replacement; "" drops the
// command. Names not listed are kept.
var commandRewrites = map[string]string{
	"left": "", "right": "", "bigl": "", "bigr": "", "Bigl": "", "Bigr": "", "big": "", "Big": "",
	"biggl": "", "biggr": "", "displaystyle": "", "textstyle": "", "quad": " ", "qquad": " ",
	"dfrac": `\frac`, "tfrac": `\frac`, "cfrac": `\frac`, "dbinom": `\binom`, "tbinom": `\binom`,
	"lvert": "|", "rvert": "|", "vert": "|", "lbrace": `\{`, "rbrace": `\}`, "varnothing": `\emptyset`,
	"ast": "*", "infin": `\infty`, "rm": "",
}

// rewriteCommands drops spacing and sizing commands, renames fraction
// variants, and removes \$ and \%, in one pass that respects command names
// (so \left never eats part of \leftarrow).
func rewriteCommands(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		c := s[i]
		if c == '~' {
			b.WriteByte(' ')
			i++
			continue
		}
		if c != '\\' {
			b.WriteByte(c)
			i++
			continue
		}
		j := i + 1
		for j < len(s) && isLetter(s[j]) {
			j++
		}
		if j == i+1 { // a control symbol such as \, or \$
			if j >= len(s) {
				i = j
				continue
			}
			switch s[j] {
			case '!', '$', '%':
			case ',', ';', ':', ' ', '>':
				b.WriteByte(' ')
			default:
				b.WriteString(s[i : j+1])
			}
			i = j + 1
			continue
		}
		name := s[i+1 : j]
		rep, ok := commandRewrites[name]
		if !ok {
			b.WriteString(s[i:j])
			i = j
			continue
		}
		if (name == "left" || name == "right" || strings.HasPrefix(name, "big") || strings.HasPrefix(name, "Big")) &&
			j < len(s) && s[j] == '.' {
			j++ // invisible delimiter
		}
		b.WriteString(rep)
		if rep != "" && isLetter(rep[len(rep)-1]) && j < len(s) && isLetter(s[j]) {
			b.WriteByte(' ')
		}
		i = j
	}
	return b.String()
}

// textCommands wrap text whose content is kept.
var textCommands = map[string]bool{
	"text": true, "textbf": true, "textit": true, "textrm": true, "textsf": true, "texttt": true,
	"textnormal": true, "textup": true, "mathrm": true, "mathbf": true, "mathit": true, "mathsf": true,
	"mathtt": true, "mathnormal": true, "mbox": true, "hbox": true, "boldsymbol": true, "bm": true,
	"emph": true,
}

// unitTextCommands may hold a trailing unit.
var unitTextCommands = [...]string{`\text{`, `\textrm{`, `\textnormal{`, `\mbox{`, `\mathrm{`, `\textup{`}

// stripUnitText removes a trailing \text{ unit} (GEM: "\text{ cm}") after an
// answer that contains a digit, so "5\text{ cm}^2" is 5 but "\text{Monday}"
// stays.
func stripUnitText(s string) string {
	t := strings.TrimSpace(s)
	end := len(t)
	for _, p := range [...]string{"^{2}", "^{3}", "^2", "^3"} { // "\text{ cm}^2"
		if strings.HasSuffix(t, p) && strings.HasSuffix(strings.TrimSpace(t[:len(t)-len(p)]), "}") {
			end = len(t) - len(p)
			break
		}
	}
	u := strings.TrimSpace(t[:end])
	if !strings.HasSuffix(u, "}") {
		return s
	}
	best := -1
	for _, cmd := range unitTextCommands {
		if k := strings.LastIndex(u, cmd); k > best {
			best = k
		}
	}
	if best <= 0 {
		return s
	}
	open := strings.IndexByte(u[best:], '{') + best
	if matchBrace(u, open) != len(u)-1 {
		return s
	}
	content := u[open+1 : len(u)-1]
	if !unitTextRe.MatchString(content) {
		return s
	}
	if tc := strings.TrimSpace(content); len(tc) < 2 && !isSpace(content[0]) {
		return s // a lone letter such as \mathrm{e} is not a unit
	}
	prefix := strings.TrimSpace(u[:best])
	if prefix == "" || !strings.ContainsAny(prefix, "0123456789") {
		return s
	}
	return prefix
}

// unwrapText replaces \text{…} and friends by their content in one pass: the
// brace that closes a wrapper is dropped, other braces are kept.
func unwrapText(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	var drop []bool // one entry per open brace: whether its closing brace is dropped
	for i := 0; i < len(s); {
		c := s[i]
		switch c {
		case '\\':
			j := i + 1
			for j < len(s) && isLetter(s[j]) {
				j++
			}
			if j == i+1 {
				end := min(j+1, len(s))
				b.WriteString(s[i:end])
				i = end
				continue
			}
			if textCommands[s[i+1:j]] {
				k := j
				for k < len(s) && isSpace(s[k]) {
					k++
				}
				if k < len(s) && s[k] == '{' {
					drop = append(drop, true)
					i = k + 1
					continue
				}
			}
			b.WriteString(s[i:j])
			i = j
			continue
		case '{':
			drop = append(drop, false)
		case '}':
			if n := len(drop); n > 0 {
				d := drop[n-1]
				drop = drop[:n-1]
				if d {
					i++
					continue
				}
			}
		}
		b.WriteByte(c)
		i++
	}
	return b.String()
}

// stripUnitWords removes a unit word after a number at the end of the
// answer. Only the tail is searched, so the cost does not grow with length.
func stripUnitWords(s string) string {
	off := max(0, len(s)-48)
	if loc := unitWordRe.FindStringIndex(s[off:]); loc != nil {
		return s[:off+loc[0]+1]
	}
	return s
}

// stripAssignment turns "x = 5" or "x \in [1,2]" into its right-hand side
// when the left is one variable and there is no other relation.
func stripAssignment(s string) string {
	loc := assignRe.FindStringIndex(s)
	if loc == nil {
		return s
	}
	rest := strings.TrimSpace(s[loc[1]:])
	if rest == "" || strings.ContainsAny(rest, "=<>") {
		return s
	}
	return rest
}

// squeezeSpaces removes spaces, keeping one only where it separates a
// command name from a following letter ("\pi r" must not become "\pir").
func squeezeSpaces(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	inCmd := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == ' ' {
			j := i
			for j < len(s) && s[j] == ' ' {
				j++
			}
			if inCmd && j < len(s) && isLetter(s[j]) {
				b.WriteByte(' ')
			}
			inCmd = false
			i = j - 1
			continue
		}
		switch {
		case c == '\\':
			b.WriteByte(c)
			if i+1 < len(s) && isLetter(s[i+1]) {
				inCmd = true
			} else if i+1 < len(s) {
				b.WriteByte(s[i+1]) // control symbol: keep as is
				i++
				inCmd = false
			}
			continue
		case isLetter(c):
		default:
			inCmd = false
		}
		b.WriteByte(c)
	}
	return b.String()
}

// argCommands take brace arguments that GEM's _fix_fracs and _fix_sqrt add
// when they are missing.
var argCommands = map[string]int{"frac": 2, "binom": 2, "sqrt": 1}

// fixArgs braces single-token arguments: \frac12 → \frac{1}{2}, \sqrt2 →
// \sqrt{2}, \frac\pi2 → \frac{\pi}{2}. Nesting beyond MaxDepth is copied as is.
func fixArgs(s string, depth int) string {
	if depth > MaxDepth || !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			i++
			continue
		}
		j := i + 1
		for j < len(s) && isLetter(s[j]) {
			j++
		}
		if j == i+1 {
			end := min(j+1, len(s))
			b.WriteString(s[i:end])
			i = end
			continue
		}
		b.WriteString(s[i:j])
		n, ok := argCommands[s[i+1:j]]
		i = j
		if !ok {
			continue
		}
		if n == 1 && i < len(s) && s[i] == '[' { // \sqrt[n]
			if k := strings.IndexByte(s[i:], ']'); k > 0 {
				b.WriteString(s[i : i+k+1])
				i += k + 1
			}
		}
		for range n {
			for i < len(s) && s[i] == ' ' {
				i++
			}
			if i >= len(s) || s[i] == '}' {
				break
			}
			var arg string
			switch {
			case s[i] == '{':
				close := matchBrace(s, i)
				if close < 0 {
					b.WriteString(s[i:])
					return b.String()
				}
				arg = fixArgs(s[i+1:close], depth+1)
				i = close + 1
			case s[i] == '\\':
				k := i + 1
				for k < len(s) && isLetter(s[k]) {
					k++
				}
				if k == i+1 {
					k = min(k+1, len(s))
				}
				arg = s[i:k]
				i = k
			default:
				arg = s[i : i+1]
				i++
			}
			b.WriteString("{" + arg + "}")
		}
	}
	return b.String()
}

// fixDecimals writes ".5" as "0.5" and drops trailing fractional zeros
// ("3.0" → "3", "2.50" → "2.5").
func fixDecimals(s string) string {
	if !strings.Contains(s, ".") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 4)
	for i := 0; i < len(s); {
		c := s[i]
		startsNumber := (isDigit(c) || (c == '.' && i+1 < len(s) && isDigit(s[i+1]))) &&
			(i == 0 || !(isDigit(s[i-1]) || s[i-1] == '.' || isLetter(s[i-1]) || s[i-1] == '_'))
		if !startsNumber {
			b.WriteByte(c)
			i++
			continue
		}
		j := i
		for j < len(s) && isDigit(s[j]) {
			j++
		}
		intPart := s[i:j]
		if j+1 < len(s) && s[j] == '.' && isDigit(s[j+1]) {
			k := j + 1
			for k < len(s) && isDigit(s[k]) {
				k++
			}
			if k < len(s) && s[k] == '.' || strings.HasPrefix(s[k:], `\overline`) {
				// "1.2.3" is not a number; "0.10\overline{6}" keeps its zero
				b.WriteString(s[i:k])
				i = k
				continue
			}
			frac := strings.TrimRight(s[j+1:k], "0")
			if intPart == "" {
				intPart = "0"
			}
			b.WriteString(intPart)
			if frac != "" {
				b.WriteString("." + frac)
			}
			i = k
			continue
		}
		b.WriteString(intPart)
		i = j
	}
	return b.String()
}

// stripOuterBraces removes braces that wrap the whole answer: "{5}" → "5".
func stripOuterBraces(s string) string {
	n := 0
	for n < len(s) && s[n] == '{' {
		n++
	}
	if n == 0 {
		return s
	}
	// close[k] is where the k-th leading brace closes, found in one pass.
	close := make([]int, n)
	var stack []int
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '{':
			stack = append(stack, i)
		case '}':
			if len(stack) == 0 {
				return s
			}
			if open := stack[len(stack)-1]; open < n {
				close[open] = i
			}
			stack = stack[:len(stack)-1]
		}
	}
	if len(stack) != 0 {
		return s
	}
	k := 0
	for k < n && close[k] == len(s)-1-k {
		k++
	}
	return s[k : len(s)-k]
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
func isDigit(c byte) bool  { return '0' <= c && c <= '9' }
func isSpace(c byte) bool  { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
