package tokenizer

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"

	"github.com/rollfleet/rollfleet/envs"
)

// corpus returns n strings drawn from a fixed seed: game prompts and
// feedback of the fleet's envs, math, code, scripts of many languages, emoji,
// whitespace runs, added tokens of every model written in the text (whole and
// cut), random characters, long words and numbers.
func corpus(n int) []string {
	rng := rand.New(rand.NewPCG(20260407, 1))
	games := gameTexts()
	frags := []func() string{
		func() string { return games[rng.IntN(len(games))] },
		func() string { return mathText(rng) },
		func() string { return codeSnippets[rng.IntN(len(codeSnippets))] },
		func() string { return unicodeText(rng) },
		func() string { return whitespaceRun(rng) },
		func() string { return specialText(rng) },
		func() string { return randomChars(rng, 1+rng.IntN(40)) },
		func() string { return longWord(rng) },
		func() string { return number(rng) },
		func() string { return prose[rng.IntN(len(prose))] },
	}
	seps := []string{"", " ", "  ", "\n", "\n\n", "\t", "\r\n", ". ", ", "}
	out := make([]string, 0, n)
	out = append(out, "", " ", "\n", "a", "  a  ", "\r\n")
	for len(out) < n {
		var sb strings.Builder
		for k := 1 + rng.IntN(4); k > 0; k-- {
			sb.WriteString(frags[rng.IntN(len(frags))]())
			sb.WriteString(seps[rng.IntN(len(seps))])
		}
		out = append(out, sb.String())
	}
	return out
}

// gameTexts plays a few steps of each env with arbitrary moves and keeps the
// system prompt, first prompt and feedback lines.
func gameTexts() []string {
	moves := []string{`\boxed{up}`, `\boxed{3}`, `\boxed{A1}`, `\boxed{left}`, "\\boxed{1 2 3 4}", "I think \\boxed{50}.", "down", `\boxed{[1, 2]}`, `\boxed{reveal 2 3}`}
	var out []string
	for _, id := range envs.IDs() {
		spec, err := envs.Lookup(id)
		if err != nil {
			continue
		}
		for seed := range uint64(3) {
			env, err := envs.New(id, nil)
			if err != nil {
				break
			}
			obs, info := env.Reset(envs.NewRNG(seed))
			system, user := spec.FirstChat(obs, info)
			out = append(out, system, user)
			for i, m := range moves[:4] {
				r := env.Step(moves[(int(seed)+i*3+len(m))%len(moves)])
				out = append(out, r.Observation)
			}
		}
	}
	return out
}

func mathText(rng *rand.Rand) string {
	a, b := rng.IntN(1000), 1+rng.IntN(99)
	forms := []string{
		`\frac{%d}{%d}`, `$x^{%d} + y_{%d}$`, `\boxed{%d/%d}`, `$$\sum_{i=1}^{%d} i^2 = %d$$`,
		`\sqrt{%d} \approx %d.4142`, `\begin{align} f(x) &= %dx + %d \\ g(x) &= \int_0^1 t\,dt \end{align}`,
		`Therefore, the answer is $\boxed{%d}$ (mod %d).`, `\left( \frac{\pi}{%d} \right) \cdot \alpha_{%d}`,
		`%d \times %d = ?`, `\(\lim_{n\to\infty} (1+1/n)^n\) = e, %d≠%d, ≤ ≥ ∞ ∑ ∫ √`,
	}
	return fmt.Sprintf(forms[rng.IntN(len(forms))], a, b)
}

var codeSnippets = []string{
	"func main() {\n\tfor i := 0; i < 10; i++ {\n\t\tfmt.Println(i)\n\t}\n}\n",
	"def f(x):\n    if x > 0:\n        return x * 2\n    return -x\n\n\nprint(f(3))",
	"class Foo:\n\tdef __init__(self):\n\t\tself.x = {'a': [1, 2, 3]}  # comment\n",
	"if (a && b || !c) { return a->b[0] >> 2; }\r\n",
	"    \t  indented_with_mixed = True\n\t\t\n",
	"SELECT * FROM users WHERE name = 'O''Brien';",
	"const re = /^[a-z]+$/gu; // don't\nlet s = `${x}`;",
	"x=1;y=2;z=x+y;print(z)\n\n\n    \n",
	"<div class=\"a\">&nbsp;&lt;tag&gt;</div>",
	"{\"key\": \"value\", \"n\": 1.5e-3, \"ok\": true}",
}

var prose = []string{
	"It's a test, isn't it? They're here; we've seen 'em. I'M SURE YOU'LL LIKE IT'S.",
	"The quick brown fox jumps over the lazy dog.",
	"HELLO World helloWorld HelloWORLD camelCaseWord snake_case_word",
	"don't DON'T Don'T 'S 's it'ſ it'ſt 'Kill 'K ﬁ",
	"Mr. Smith's 3rd-floor office—open 9am–5pm…",
}

var scripts = []string{
	"你好世界，这是一个测试。", "日本語のテキスト、カタカナとひらがな。", "한국어 텍스트입니다",
	"مرحبا بالعالم", "שלום עולם", "Привет, мир!", "Γειά σου Κόσμε", "สวัสดีชาวโลก", "नमस्ते दुनिया",
	"👨‍👩‍👧‍👦", "👍🏽", "🇺🇸🇯🇵", "🏳️‍🌈", "❤️", "🙂🙃", "e\u0301", "A\u030a", "\u1100\u1161\u11a8",
	"Z̤͔ͧ̑̓ä͖̭̈̇lͮ̒ͫǧ̗͚̚o̙̔ͮ̇͐̇", "ＦＵＬＬＷＩＤＴＨ", "①②③", "µ Å ﬀ ǅ", "\u200b\u200d\u2060",
}

// unicodeText mixes scripts, both normalization forms of them, and random CJK.
func unicodeText(rng *rand.Rand) string {
	s := scripts[rng.IntN(len(scripts))]
	switch rng.IntN(4) {
	case 0:
		return norm.NFD.String(s)
	case 1:
		return norm.NFC.String(s + "Café naïve Ångström")
	case 2:
		var sb strings.Builder
		for range 1 + rng.IntN(12) {
			sb.WriteRune(rune(0x4E00 + rng.IntN(0x9FA5-0x4E00)))
		}
		return sb.String()
	}
	return s
}

func whitespaceRun(rng *rand.Rand) string {
	ws := []string{" ", " ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2003", "\u0085", "\ufeff", "\v", "\f"}
	var sb strings.Builder
	for range 1 + rng.IntN(8) {
		sb.WriteString(strings.Repeat(ws[rng.IntN(len(ws))], 1+rng.IntN(4)))
		if rng.IntN(3) == 0 {
			sb.WriteString("x")
		}
	}
	return sb.String()
}

var specials = []string{
	"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
	"<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|reserved_special_token_5|>",
	"<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>", "<pad>", "<unk>", "<mask>", "<unused12>",
	"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<｜tool▁sep｜>",
	"<|start|>", "<|message|>", "<|channel|>", "<|return|>", "<|end|>", "<|call|>", "<|constrain|>",
}

// specialText writes an added token whole, cut short, or glued to words.
func specialText(rng *rand.Rand) string {
	s := specials[rng.IntN(len(specials))]
	switch rng.IntN(4) {
	case 0:
		r := []rune(s)
		return string(r[:1+rng.IntN(len(r)-1)])
	case 1:
		return "user" + s + "assistant\n"
	case 2:
		return s + s + " " + s
	}
	return s
}

// randomChars draws assigned code points (in Go's Unicode tables), mostly
// from the lower planes, controls included.
func randomChars(rng *rand.Rand, n int) string {
	var sb strings.Builder
	for sb.Len() < n*2 {
		var r rune
		switch rng.IntN(4) {
		case 0:
			r = rune(rng.IntN(0x80))
		case 1:
			r = rune(rng.IntN(0x800))
		case 2:
			r = rune(rng.IntN(0x10000))
		default:
			r = rune(rng.IntN(0x30000))
		}
		if unicode.In(r, unicode.Cs, unicode.Co, unassigned) {
			continue
		}
		sb.WriteRune(r)
	}
	return sb.String()
}

// unassigned is Cn in Go's tables (Unicode 15.0). Characters assigned since
// are letters or symbols to the reference, whose tables are newer, and split
// differently; the package doc says so.
var unassigned = unicode.Categories["Cn"]

func longWord(rng *rand.Rand) string {
	letters := "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZéß"
	switch rng.IntN(4) {
	case 0:
		return strings.Repeat(string(letters[rng.IntN(26)]), 20+rng.IntN(300))
	case 1:
		return "https://example.com/" + strings.Repeat("path/", rng.IntN(10)) + "?q=a&b=c#frag"
	case 2:
		return "Pneumonoultramicroscopicsilicovolcanoconiosis" + strings.Repeat("ity", rng.IntN(20))
	}
	var sb strings.Builder
	for range 10 + rng.IntN(120) {
		sb.WriteByte(letters[rng.IntN(52)])
	}
	return sb.String()
}

func number(rng *rand.Rand) string {
	digits := func(n int) string {
		var sb strings.Builder
		for range n {
			sb.WriteByte(byte('0' + rng.IntN(10)))
		}
		return sb.String()
	}
	switch rng.IntN(5) {
	case 0:
		return digits(1 + rng.IntN(40))
	case 1:
		return "-" + digits(1+rng.IntN(6)) + "." + digits(1+rng.IntN(6))
	case 2:
		return digits(1+rng.IntN(3)) + "," + digits(3) + "," + digits(3)
	case 3:
		return digits(1) + "." + digits(3) + "e-" + digits(2)
	}
	return "٣٤٥ ١٢ 四十二 ½ ² Ⅻ " + digits(rng.IntN(8))
}
