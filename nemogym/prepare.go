package nemogym

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// QA is one question/answer row of a file to prepare. The answer may be
// named expected_answer, answer or label, and the question question or
// prompt.
type QA struct {
	Question string
	Answer   string
}

// UnmarshalJSON reads the accepted spellings of a question/answer row.
func (q *QA) UnmarshalJSON(data []byte) error {
	var raw struct {
		Question       *string `json:"question"`
		Prompt         *string `json:"prompt"`
		ExpectedAnswer *string `json:"expected_answer"`
		Answer         *string `json:"answer"`
		Label          *string `json:"label"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	pick := func(ss ...*string) (string, bool) {
		for _, s := range ss {
			if s != nil {
				return *s, true
			}
		}
		return "", false
	}
	var ok bool
	if q.Question, ok = pick(raw.Question, raw.Prompt); !ok || q.Question == "" {
		return ErrNoQuestion
	}
	if q.Answer, ok = pick(raw.ExpectedAnswer, raw.Answer, raw.Label); !ok {
		return fmt.Errorf("nemogym: row has no expected_answer, answer or label")
	}
	return nil
}

// PrepareOptions are the optional sampling fields written into every item.
type PrepareOptions struct {
	Temperature     *float64
	MaxOutputTokens *int32
}

// PrepareJSONL turns question/answer rows (JSONL) into NeMo Gym data items
// (JSONL), one per row in order, and returns how many it wrote. A bad row is
// an error naming its line; blank lines are skipped.
func PrepareJSONL(r io.Reader, w io.Writer, opts PrepareOptions) (int, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	bw := bufio.NewWriter(w)
	var line []byte
	n := 0
	for lineNo := 1; sc.Scan(); lineNo++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var qa QA
		if err := json.Unmarshal(sc.Bytes(), &qa); err != nil {
			return n, fmt.Errorf("nemogym: line %d: %w", lineNo, err)
		}
		item := Prepare(qa.Question, qa.Answer, opts.Temperature, opts.MaxOutputTokens)
		line = append(item.AppendPython(line[:0]), '\n')
		if _, err := bw.Write(line); err != nil {
			return n, fmt.Errorf("nemogym: write: %w", err)
		}
		n++
	}
	if err := sc.Err(); err != nil {
		return n, fmt.Errorf("nemogym: read: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return n, fmt.Errorf("nemogym: write: %w", err)
	}
	return n, nil
}
