package envs

import (
	"encoding/json"
	"strings"
)

// NeMo Gym's math judge (its math_with_judge server, adapted from Arena
// Hard): the system message, the prompt template and the two verdict labels.
const (
	JudgeSystemMessage = "Please act as an impartial judge and evaluate the equivalence of the solutions given by two AI assistants to the mathematical problem displayed below. You will be given AI assistant A's answer and AI assistant B's answer. Your job is to evaluate whether assistant A's answer is equivalent to assistant B's answer.\n\nConsider the mathematical equivalence of the AI assistants' answers above all other considerations. If the problem requests special formatting instructions, you may disregard any formatting considerations when evaluating the answers -- consider only mathematical equivalence.\n\nAfter evaluating both answers for equivalence, you must output only one of the following choices as your final verdict with a label:\n\n1.  The AI assistants' answers are equivalent: [[A=B]]\n2.  The AI assistants' answers are different: [[A!=B]]\n\nExample output: \"My final verdict is different [[A!=B]]\"."
	JudgeEqualLabel    = "[[A=B]]"
	JudgeNotEqualLabel = "[[A!=B]]"
)

// JudgePrompt is the user message asking the judge about answers A and B.
func JudgePrompt(question, first, second string) string {
	return "<|Problem|>\n" + question + "\n\n<|Start of Assistant A's Answer|>\n" + first +
		"\n<|End of Assistant A's Answer|>\n\n<|Start of Assistant B's Answer|>\n" + second + "\n<|End of Assistant B's Answer|>"
}

// JudgeSaysEqual reads a judge's reply as NeMo Gym does: the label that
// comes first decides, and a reply with neither label means not equal.
func JudgeSaysEqual(reply string) bool {
	eq, ne := strings.Index(reply, JudgeEqualLabel), strings.Index(reply, JudgeNotEqualLabel)
	return eq >= 0 && (ne < 0 || eq < ne)
}

// JudgeRequest is what an env asks an outside judge: whether Generated (the
// content of the response's last box) is equal to Expected, for Question.
type JudgeRequest struct {
	Question, Expected, Generated string
}

// JudgeVerdict is a judge's answer: Equal when the judge said the answers
// are equal both ways round, and Evaluations, the JSON list of its prompts
// and replies (NeMo Gym's judge_evaluations). Error, when set, says why the
// judge could not be asked (NeMo Gym's judge_failed): the answer then keeps
// the grader's word.
type JudgeVerdict struct {
	Equal       bool
	Evaluations json.RawMessage
	Error       string
}

// Judged is implemented by envs whose last step may be settled by an outside
// judge (which needs I/O, so the env only asks): after Step, PendingJudge
// says what to ask, if anything; Judge settles the step with the verdict and
// returns the step's result, which replaces the one Step returned.
type Judged interface {
	PendingJudge() (JudgeRequest, bool)
	Judge(JudgeVerdict) StepResult
}
