package mathgrade

import (
	"regexp"
	"sort"
	"strings"
)

// Target is the kind of text an answer was extracted from, in the terms of
// math_verify's extraction configs.
type Target uint8

const (
	// TargetNone means nothing was extracted.
	TargetNone Target = iota
	// TargetBoxed is \boxed{…} (or \fbox{…}); several boxes close together
	// are one answer, a set.
	TargetBoxed
	// TargetLatex is a math environment: $…$, $$…$$, \(…\), \[…\], or a
	// plain \frac{a}{b} of numbers.
	TargetLatex
	// TargetExpr is a plain number ("1,234.5", "50%") or a plain arithmetic
	// expression ("3/4", "(2+3)*4").
	TargetExpr
)

// String names the target.
func (t Target) String() string {
	switch t {
	case TargetBoxed:
		return "boxed"
	case TargetLatex:
		return "latex"
	case TargetExpr:
		return "expr"
	}
	return "none"
}

// Answer is what a response commits to, as math_verify's parser finds it.
type Answer struct {
	// Text is the extracted answer: the content of the box (several boxes
	// joined by ","), of the math environment (a trailing percent word kept
	// as "%"), or the plain number or expression.
	Text string
	// Target is what the answer was written as.
	Target Target
	// Priority is the math_verify priority of the pattern that matched:
	// 0 "final answer is X. I hope", 50 "final answer … is X" and boxed,
	// 100 "answer: X", 200 "answer … X", 300 anywhere.
	Priority int
}

// maxScan bounds how much of a response the extraction patterns read: the
// last maxScan bytes, where final answers are. NeMo Gym reads everything but
// kills a verifier that runs for more than 10 s; this bound keeps every call
// well under a millisecond per kilobyte instead.
const maxScan = 64 << 10

// Grade rewards a model response against the expected answer the way NeMo
// Gym's math_with_judge server does with its library verifier (math_verify,
// precision 6, no LLM judge); it is [Options.Grade] with the zero options:
//
//  1. The response must contain a complete, non-blank \boxed{…}; without
//     one the reward is 0 and nothing is extracted (NeMo Gym checks this
//     before calling math_verify).
//  2. The expected answer is stripped of outer \(…\) and $…$, wrapped in
//     \boxed{…} and reduced to its (last) boxed content, so an expected
//     answer that is itself a solution text with a box inside is its box.
//  3. The prediction is chosen by [ExtractAnswer]: "final answer is X. I
//     hope" first, then the rightmost of "final answer … is X" and the
//     boxed answer, and so on by math_verify's priorities.
//  4. The two are compared by the asymmetric rules of math_verify's verify
//     (see [Equivalent] for the rules; the asymmetries kept are that an
//     expected inequality such as "-1 < x < 2" matches a predicted interval
//     "(-1, 2)" but not the other way round, and that a predicted equation
//     such as "2x+z=1" is its right-hand side against an expected "1" but
//     not the other way round).
//
// Result.Extracted is the extracted prediction ("" when there is none) and
// Result.Expected is the expected answer with outer delimiters removed.
func Grade(response, expected string) Result { return Options{}.Grade(response, expected) }

// Grade is [Grade] with these options.
func (o Options) Grade(response, expected string) Result {
	res := Result{Expected: strings.TrimSpace(stripDelims(strings.TrimSpace(expected)))}
	ans, err := Extract(response)
	res.Extracted = ans
	if err != nil {
		return res
	}
	gold := ExpectedAnswer(expected)
	if gold == "" {
		return res
	}
	if o.equivalent(ans, gold, false) {
		res.Matched = true
		res.Reward = 1
	}
	return res
}

// Extract returns the answer a response commits to, as [Grade] reads it: the
// response must contain a complete, non-blank \boxed{…} (NeMo Gym's gate),
// and the answer is then the one [ExtractAnswer] picks. It returns
// [ErrNoAnswer] when there is no such box and [ErrTooLong], with the answer,
// when the answer is over [MaxAnswerLen] and would not be compared.
func Extract(response string) (string, error) {
	if _, ok := CommittedBox(response); !ok {
		return "", ErrNoAnswer
	}
	a, ok := ExtractAnswer(response)
	if !ok || strings.TrimSpace(a.Text) == "" {
		return "", ErrNoAnswer
	}
	if len(a.Text) > MaxAnswerLen {
		return a.Text, ErrTooLong
	}
	return a.Text, nil
}

// CommittedBox returns the exact content of the response's last complete
// \boxed{…} when it is not blank: NeMo Gym's gate both for grading a
// response at all and for asking the judge about it.
func CommittedBox(s string) (string, bool) {
	box, ok := LastBoxRaw(s)
	if !ok || strings.TrimSpace(box) == "" {
		return "", false
	}
	return box, true
}

// LastBoxRaw is NeMo Gym's _extract_last_boxed_answer: the exact content of
// the last complete \boxed{…}. Like NeMo Gym it counts every brace (escaped
// ones too) and ignores \fbox and "\boxed 5" (LastBoxed reads those, as
// GEM does).
func LastBoxRaw(s string) (string, bool) {
	i := strings.LastIndex(s, `\boxed{`)
	if i < 0 {
		return "", false
	}
	start, depth := i+len(`\boxed{`), 1
	for j := start; j < len(s); j++ {
		switch s[j] {
		case '{':
			depth++
		case '}':
			if depth--; depth == 0 {
				return s[start:j], true
			}
		}
	}
	return "", false
}

// ExpectedAnswer reduces a reference answer the way NeMo Gym prepares it for
// math_verify: outer \(…\) then $…$ are stripped, the rest is wrapped in
// \boxed{…} and the boxed content is taken as for a prediction, so
// "The answer is \boxed{5}" becomes "5" and "\boxed{1}, \boxed{2}" becomes
// "1,2".
func ExpectedAnswer(expected string) string {
	s := strings.TrimSpace(expected)
	if strings.HasPrefix(s, `\(`) && strings.HasSuffix(s, `\)`) && len(s) >= 4 {
		s = strings.TrimSpace(s[2 : len(s)-2])
	}
	if strings.HasPrefix(s, "$") && strings.HasSuffix(s, "$") && len(s) > 1 {
		s = strings.TrimSpace(s[1 : len(s)-1])
	}
	if len(s) > MaxAnswerLen {
		return s
	}
	parts := boxedContents(`\boxed{` + s + `}`)
	return strings.Join(parts, ",")
}

// boxSepRe is what may separate two boxes that form one answer.
var boxSepRe = regexp.MustCompile(`\b(?:and|or)\b|,|;`)

// boxedContents returns the contents of the last \boxed{…} or \fbox{…} of s
// and of the boxes before it that belong to the same answer, in order, as
// latex2sympy2_extended's extract_boxed_content does in "last" mode: walking
// from the right, an earlier box is kept while the text between it and the
// next is shorter than 10 bytes, or shorter than 70 bytes with a separator
// ("and", "or", ",", ";") and a different content. Repeated neighbouring
// contents count once. An unclosed last box yields everything after its
// brace; nil means no box at all.
func boxedContents(s string) []string {
	var rev []string
	maxPos := len(s)
	lastStart := -1
	for {
		start, cmdEnd := lastBoxCommand(s, maxPos)
		if start < 0 {
			break
		}
		k := cmdEnd
		for k < maxPos && isSpace(s[k]) {
			k++
		}
		if k >= maxPos {
			break
		}
		if s[k] != '{' {
			if len(rev) == 0 {
				rev = append(rev, strings.TrimSpace(s[k:maxPos]))
			}
			break
		}
		close := matchBraceWithin(s, k, maxPos)
		if close < 0 {
			if len(rev) == 0 {
				rev = append(rev, strings.TrimSpace(s[k+1:maxPos]))
			}
			break
		}
		content := strings.TrimSpace(s[k+1 : close])
		if lastStart >= 0 {
			between := s[close+1 : lastStart]
			prev := rev[len(rev)-1]
			if !(len(between) < 10 || content != prev && len(between) < 70 && boxSepRe.MatchString(between)) {
				break
			}
		}
		if len(rev) == 0 || rev[len(rev)-1] != content {
			rev = append(rev, content)
		}
		if len(rev) > MaxElements {
			break
		}
		lastStart = start
		maxPos = start
	}
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	return rev
}

// lastBoxCommand returns where the last \boxed or \fbox before end starts
// and where its name ends, or -1, reading backwards only as far as it must.
func lastBoxCommand(s string, end int) (start, cmdEnd int) {
	for i := strings.LastIndexByte(s[:end], '\\'); i >= 0; i = strings.LastIndexByte(s[:i], '\\') {
		for _, cmd := range [...]string{`\boxed`, `\fbox`} {
			if i+len(cmd) <= end && strings.HasPrefix(s[i:], cmd) {
				return i, i + len(cmd)
			}
		}
	}
	return -1, -1
}

// matchBraceWithin is matchBrace limited to s[:end]: the index of the '}'
// that closes the '{' at open, or -1.
func matchBraceWithin(s string, open, end int) int {
	depth := 0
	for i := open; i < end; i++ {
		switch s[i] {
		case '\\':
			i++
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// The pieces of math_verify's extraction patterns, in RE2 syntax (RE2 has no
// look-behind; the few look-behind conditions are checked by hand).
const (
	// One math environment: $$…$$, \[…\], $…$, \(…\), " […] ", or a plain
	// \frac of two numbers; then an optional percent word.
	envRe = `(?:\$\$((?:[^$]|\$[^$])+?)\$\$` +
		`|\\\[((?s:.)+?)\\\]` +
		`|\$((?:\\\$|[^\n$])+?)\$` +
		`|\\\(((?:[^\\\n]|\\[^)])+?)\\\)` +
		`|\s\[([^\n\]\[]+?)\]\s` +
		`|(-?\\frac\{-?\d+(?:[.,]\d+)?\}\{-?\d+(?:[.,]\d+)?\}))` +
		`(\s*(?:\\?%|[Pp]ercentage|[Pp]ercent|[Pp]ct))?`
	// Separator between environments of one answer: "$1$, $2$ and $3$".
	envSepRe = `^\s*(?:,?and|,?or|,)\s*`
	// A plain number with optional thousands groups, decimal part and
	// percent word.
	numberRe = `(?:(-?[1-9]\d{0,2}(?:[ ,]\d{3})+)(\.\d+)?|(-?\d+)([.,]\d+)|(\.\d+)|(-?\d+))` +
		`(\s*(?:%|[Pp]ercentage|[Pp]ercent|[Pp]ct))?`
	exprChars = `[\d.\s+\-*×/^()÷]`
	exprOps   = `[+\-*×/^()÷]`
	// A plain expression: starts with a digit, has an operator.
	exprRe      = `(-?\(?-?\d` + exprChars + `*` + exprOps + exprChars + `+\)?)`
	exprPrefix  = `(?:^|\s|=)(?:\*\*)?`
	exprSuffix  = `(?:\*\*)?(?:\.|,|:|\s|\)|\$|$)`
	currencyRe  = `[$€£¥₹₽]?`
	exprAnchors = exprPrefix + exprRe + exprSuffix
	numAnchors  = exprPrefix + currencyRe + numberRe
)

var (
	envStartRe  = regexp.MustCompile(envRe)
	envAtRe     = regexp.MustCompile(`^` + envRe)
	envSepAtRe  = regexp.MustCompile(envSepRe)
	exprAtRe    = regexp.MustCompile(`^` + exprAnchors)
	numAtRe     = regexp.MustCompile(`^` + numAnchors)
	exprAnyRe   = regexp.MustCompile(exprAnchors)
	numAnyRe    = regexp.MustCompile(numAnchors)
	hopeRe      = regexp.MustCompile(`^\.?\s?I hope`)
	notEqualsRe = regexp.MustCompile(`^\s*=`)

	finalIsRe     = regexp.MustCompile(`(?i:final answer is):?\s*`)
	finalJustIsRe = regexp.MustCompile(`(?i:final answer.{0,100}?)\s+is:?\s*`)
	finalJustIsX  = regexp.MustCompile(`(?i:final answer.{0,100}?)\s+is:?`)
	answerColonRe = regexp.MustCompile(`(?i:answer):.{0,50}?`)
	answerWordRe  = regexp.MustCompile(`(?i:answer).{0,50}?`)
	answerColonEq = regexp.MustCompile(`(?i:answer):(?:.{0,100}=\s*|.{0,50}?)`)
	answerWordEq  = regexp.MustCompile(`(?i:answer)(?:.{0,100}=\s*|.{0,50}?)`)
)

// Anchored matches read at most this far: a number or plain expression is
// short, a math environment holds one answer.
const (
	exprWindow = 512
	envWindow  = 4096
)

// candidate is one match of an extraction pattern.
type candidate struct {
	start, end int
	ans        Answer
}

// envPat and exprPat are a level's environment and plain-expression patterns.
type envPat struct {
	re   *regexp.Regexp
	hope bool
}
type exprPat struct {
	re         *regexp.Regexp
	hope, noEq bool
}

// extractLevels are the extraction priorities ExtractAnswer tries in order.
var extractLevels = []struct {
	prio  int
	boxed bool
	env   []envPat
	expr  []exprPat
	any   bool
}{
	{prio: 0, env: []envPat{{finalIsRe, true}}, expr: []exprPat{{finalIsRe, true, false}}},
	{prio: 50, boxed: true, env: []envPat{{finalJustIsRe, false}}, expr: []exprPat{{finalJustIsX, false, false}}},
	{prio: 100, env: []envPat{{answerColonRe, false}}, expr: []exprPat{{answerColonEq, false, true}}},
	{prio: 200, env: []envPat{{answerWordRe, false}}, expr: []exprPat{{answerWordEq, false, true}}},
	{prio: 300, any: true},
}

// ExtractAnswer finds the answer of a response as math_verify's parser does
// with NeMo Gym's prediction targets (plain expressions and LaTeX, boxed at
// priority 50), without NeMo Gym's requirement of a box:
//
//   - priority 0: "final answer is X. I hope" (X a math environment or a
//     number or expression);
//   - priority 50: "final answer … is X", and the boxed answer (the last
//     box and the boxes just before it, see [ExpectedAnswer]);
//   - priority 100: "answer: … X"; 200: "answer … X" (for numbers also
//     "answer … = X");
//   - priority 300: any math environment, then any number or expression.
//
// Within one priority the match that ends last wins (the leftmost of those
// ending together); an answer that normalizes to nothing is skipped. Several
// environments joined by ",", "and" or "or" ("$1$ and $2$") are one answer,
// a set. Priorities are tried in order and the first that yields an answer
// ends the search. The boxed answer is looked for in the whole response, the
// other patterns in its last [maxScan] bytes.
func ExtractAnswer(response string) (Answer, bool) {
	s := response
	off := 0
	if len(s) > maxScan {
		off = len(s) - maxScan
	}
	w := s[off:]
	for _, lv := range extractLevels {
		var cands []candidate
		add := func(c candidate) {
			if strings.TrimSpace(c.ans.Text) != "" {
				c.start += off
				c.end += off
				cands = append(cands, c)
			}
		}
		if lv.boxed {
			// The plain boxed pattern runs from the first \boxed{ to the
			// last '}' of the whole text.
			if first := strings.Index(s, `\boxed{`); first >= 0 {
				if last := strings.LastIndexByte(s, '}'); last > first {
					if parts := boxedContents(s[first : last+1]); len(parts) > 0 {
						add(candidate{first - off, last + 1 - off, Answer{strings.Join(parts, ","), TargetBoxed, lv.prio}})
					}
				}
			}
		}
		for _, p := range lv.env {
			for _, loc := range p.re.FindAllStringIndex(w, -1) {
				if c, ok := envChainAt(w, loc[1], lv.prio); ok && (!p.hope || hopeRe.MatchString(w[c.end:])) {
					c.start = loc[0]
					add(c)
				}
			}
		}
		for _, p := range lv.expr {
			for _, loc := range p.re.FindAllStringIndex(w, -1) {
				c, ok := exprAt(w, loc[1], lv.prio)
				if !ok || p.hope && !hopeRe.MatchString(w[c.end:]) || p.noEq && notEqualsRe.MatchString(w[c.end:]) {
					continue
				}
				c.start = loc[0]
				add(c)
			}
		}
		if lv.any {
			for _, loc := range envStartRe.FindAllStringIndex(w, -1) {
				if c, ok := envChainAt(w, loc[0], lv.prio); ok {
					add(c)
				}
			}
			for _, re := range []*regexp.Regexp{exprAnyRe, numAnyRe} {
				for _, loc := range re.FindAllStringIndex(w, -1) {
					if c, ok := exprAt(w, loc[0], lv.prio); ok {
						add(c)
					}
				}
			}
		}
		sort.SliceStable(cands, func(i, j int) bool {
			a, b := cands[i], cands[j]
			if a.end != b.end {
				return a.end > b.end
			}
			return a.start < b.start
		})
		for _, c := range cands {
			if len(c.ans.Text) > MaxAnswerLen || Normalize(c.ans.Text) != "" {
				return c.ans, true
			}
		}
	}
	return Answer{}, false
}

// envChainAt matches up to six math environments joined by separators at
// s[at:], math_verify's "first" and "next1…5" groups.
func envChainAt(s string, at, prio int) (candidate, bool) {
	var parts []string
	pos := at
	for len(parts) < 6 {
		rest := s[pos:min(len(s), pos+envWindow)]
		if len(parts) > 0 {
			sep := envSepAtRe.FindStringIndex(rest)
			if sep == nil {
				break
			}
			rest = rest[sep[1]:]
			pos += sep[1]
		}
		m := envAtRe.FindStringSubmatchIndex(rest)
		if m == nil {
			break
		}
		// (?<!\\|\d)\$: an inline $ must not follow a backslash or digit.
		if pos > 0 && rest[0] == '$' && (s[pos-1] == '\\' || isDigit(s[pos-1])) {
			break
		}
		var content string
		for g := 1; g <= 6; g++ {
			if m[2*g] >= 0 {
				content = rest[m[2*g]:m[2*g+1]]
				if g == 6 || g == 5 {
					content = strings.TrimSpace(content)
				}
				break
			}
		}
		if m[14] >= 0 { // percent word after the environment
			content = strings.TrimSpace(content) + `\%`
		}
		if inner := boxedContents(content); len(inner) > 0 {
			content = strings.Join(inner, ",")
		}
		parts = append(parts, strings.TrimSpace(content))
		pos += m[1]
	}
	if len(parts) == 0 {
		return candidate{}, false
	}
	return candidate{at, pos, Answer{strings.Join(parts, ","), TargetLatex, prio}}, true
}

// operatorSigns and digitSeparators rewrite matched expressions and numbers:
// built once, not per match.
var (
	operatorSigns   = strings.NewReplacer("×", "*", "÷", "/")
	digitSeparators = strings.NewReplacer(",", "", " ", "")
)

// exprAt matches a plain expression or number at s[at:]; an expression needs
// an operator and the right kind of neighbours, a number does not.
func exprAt(s string, at, prio int) (candidate, bool) {
	rest := s[at:min(len(s), at+exprWindow)]
	if m := exprAtRe.FindStringSubmatchIndex(rest); m != nil {
		text := strings.TrimSpace(rest[m[2]:m[3]])
		text = operatorSigns.Replace(text)
		return candidate{at, at + m[3], Answer{text, TargetExpr, prio}}, true
	}
	m := numAtRe.FindStringSubmatchIndex(rest)
	if m == nil {
		return candidate{}, false
	}
	group := func(g int) string {
		if m[2*g] < 0 {
			return ""
		}
		return rest[m[2*g]:m[2*g+1]]
	}
	integer := group(1) + group(3) + group(6)
	decimal := group(2) + group(4) + group(5)
	integer = digitSeparators.Replace(integer)
	neg := strings.HasPrefix(integer, "-")
	integer = strings.TrimLeft(strings.TrimPrefix(integer, "-"), "0")
	if integer == "" {
		integer = "0"
	}
	if neg {
		integer = "-" + integer
	}
	text := integer + strings.Replace(decimal, ",", ".", 1)
	if group(7) != "" {
		text += `\%`
	}
	return candidate{at, at + m[1], Answer{text, TargetExpr, prio}}, true
}
