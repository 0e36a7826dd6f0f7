package messages

import (
	"fmt"
	"hash/fnv"
	"math/bits"
	"strconv"
	"strings"
)

// DefaultPrefix is the subject prefix used when none is configured.
const DefaultPrefix = "rf"

// Subjects names rollfleet's subjects and JetStream streams under one prefix, so that several
// fleets can share a NATS account. The zero value uses DefaultPrefix.
type Subjects struct {
	Prefix string
}

// NewSubjects returns the subjects under prefix, or under DefaultPrefix when prefix is empty.
// It panics if prefix is not valid (see ValidatePrefix), which callers taking the prefix from
// user input should check first.
func NewSubjects(prefix string) Subjects {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if err := ValidatePrefix(prefix); err != nil {
		panic(err)
	}
	return Subjects{Prefix: prefix}
}

// ValidatePrefix reports whether prefix is usable as a subject prefix: one or more dot-separated
// tokens of ASCII letters, digits, '-' and '_'. The restriction is narrower than NATS's so that
// the stream names derived from the prefix are valid as well.
func ValidatePrefix(prefix string) error {
	for tok := range strings.SplitSeq(prefix, ".") {
		if tok == "" {
			return fmt.Errorf("messages: subject prefix %q: empty token", prefix)
		}
		for i := 0; i < len(tok); i++ {
			if c := tok[i]; !isAlnum(c) && c != '-' && c != '_' {
				return fmt.Errorf("messages: subject prefix %q: character %q not allowed (only letters, digits, '-', '_' and '.' between tokens)", prefix, c)
			}
		}
	}
	return nil
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

func (s Subjects) prefix() string {
	if s.Prefix == "" {
		return DefaultPrefix
	}
	return s.Prefix
}

func (s Subjects) subject(kind, last string) string { return s.prefix() + "." + kind + "." + last }

// stream names a stream: the prefix upper-cased, with '.' (not allowed in stream names) as '_'.
func (s Subjects) stream(kind string) string {
	return strings.ToUpper(strings.ReplaceAll(s.prefix(), ".", "_")) + "_" + kind
}

// AnyRun stands for every run in the subject filters below (EpisodesFilter and the like). It
// is not a run id of its own: Token escapes a run id "*" as "%2A".
const AnyRun = "*"

// runToken is Token(run), or the wildcard for AnyRun.
func runToken(run string) string {
	if run == AnyRun {
		return "*"
	}
	return Token(run)
}

// Episodes is the work-queue subject of a run's EpisodeRequests for one env:
// <prefix>.episodes.<Token(run)>.<Token(env)>.
func (s Subjects) Episodes(run, env string) string {
	return s.subject("episodes", Token(run)+"."+Token(env))
}

// EpisodesFilter matches the EpisodeRequests of run (AnyRun: of every run) for env.
func (s Subjects) EpisodesFilter(run, env string) string {
	return s.subject("episodes", runToken(run)+"."+Token(env))
}

// EpisodesOfRun matches every EpisodeRequest of run.
func (s Subjects) EpisodesOfRun(run string) string { return s.subject("episodes", Token(run)+".>") }

// EpisodesAll matches the EpisodeRequests of every run and env.
func (s Subjects) EpisodesAll() string { return s.subject("episodes", ">") }

// Generate is the request/reply subject of GenerateRequest.
func (s Subjects) Generate() string { return s.subject("llm", "generate") }

// Tokenize is the request/reply subject of TokenizeRequest.
func (s Subjects) Tokenize() string { return s.subject("llm", "tokenize") }

// Detokenize is the request/reply subject of DetokenizeRequest.
func (s Subjects) Detokenize() string { return s.subject("llm", "detokenize") }

// TokenizeChat is the request/reply subject of ChatTokenizeRequest.
func (s Subjects) TokenizeChat() string { return s.subject("llm", "tokenize_chat") }

// ModelInfo is the request/reply subject of ModelInfoRequest.
func (s Subjects) ModelInfo() string { return s.subject("llm", "info") }

// stepShardLevels is how many shard tokens a steps subject carries.
const stepShardLevels = 4

// MaxStepShards is the most parts the steps stream splits into for collectors, and the number
// of slots a group's steps can be in (StepSlot). A steps subject carries its slot at every
// power of two up to it: the token at level k (1 to 4) is the slot modulo 2^k, the episode's
// shard among 2^k collectors, so that the steps of a shard are matched by one subject filter
// (StepsOfShard). A group's episodes share a slot, so a collector assembles whole groups.
const MaxStepShards = 1 << stepShardLevels

// StepSlot is the slot of a group's steps: the 32-bit FNV-1a hash of the group id modulo
// MaxStepShards.
func StepSlot(group string) int {
	h := fnv.New32a()
	h.Write([]byte(group))
	return int(h.Sum32() % MaxStepShards)
}

// Steps is the subject of the StepEvents of an episode of group:
// <prefix>.steps.<Token(run)>.<slot%2>.<slot%4>.<slot%8>.<slot%16>.<Token(episode)>, where
// slot is StepSlot(group).
func (s Subjects) Steps(run, group, episode string) string {
	return s.stepsIn(run, StepSlot(group), episode)
}

func (s Subjects) stepsIn(run string, slot int, episode string) string {
	return s.subject("steps", Token(run)+"."+slotTokens[slot]+"."+Token(episode))
}

// slotTokens are a steps subject's shard tokens for each slot: the slot modulo 2, 4, 8 and 16.
var slotTokens = func() (toks [MaxStepShards]string) {
	for slot := range toks {
		levels := make([]string, stepShardLevels)
		for k := range levels {
			levels[k] = strconv.Itoa(slot % (2 << k))
		}
		toks[slot] = strings.Join(levels, ".")
	}
	return toks
}()

// StepsAll matches the StepEvents of every episode.
func (s Subjects) StepsAll() string { return s.subject("steps", ">") }

// StepsOfEpisode matches the StepEvents of an episode of run, whatever its group.
func (s Subjects) StepsOfEpisode(run, episode string) string {
	return s.subject("steps", Token(run)+strings.Repeat(".*", stepShardLevels)+"."+Token(episode))
}

// ValidateShard reports whether index of count names a part of the steps stream: count a
// power of two from 1 to MaxStepShards, index from 0 below it.
func ValidateShard(index, count int) error {
	if count < 1 || count > MaxStepShards || count&(count-1) != 0 || index < 0 || index >= count {
		return fmt.Errorf("messages: no shard %d of %d (an index from 0 below a count of 1, 2, 4, 8 or %d)", index, count, MaxStepShards)
	}
	return nil
}

// StepsOfShard matches the StepEvents of shard index of count, of every run: those whose
// slot modulo count is index. It panics when ValidateShard refuses the shard.
func (s Subjects) StepsOfShard(index, count int) string {
	if err := ValidateShard(index, count); err != nil {
		panic(err)
	}
	if count == 1 {
		return s.StepsAll()
	}
	level := bits.TrailingZeros(uint(count))
	return s.subject("steps", "*"+strings.Repeat(".*", level-1)+"."+strconv.Itoa(index)+".>")
}

// ParseSteps returns the run, slot and episode a Steps subject names. The run of a subject
// whose other tokens are bad is still returned when its own token is good.
func (s Subjects) ParseSteps(subject string) (run string, slot int, episode string, err error) {
	rest, ok := strings.CutPrefix(subject, s.prefix()+".steps.")
	toks := strings.Split(rest, ".")
	if !ok || len(toks) != stepShardLevels+2 {
		return "", 0, "", fmt.Errorf("messages: %q is not a steps subject", subject)
	}
	if run, err = ParseToken(toks[0]); err != nil {
		return "", 0, "", err
	}
	// Only the form Steps writes: the slot's last token, no other spelling, and every
	// level's token the slot modulo the level's count.
	slot, err = strconv.Atoi(toks[stepShardLevels])
	if err != nil || slot < 0 || slot >= MaxStepShards || slotTokens[slot] != strings.Join(toks[1:stepShardLevels+1], ".") {
		return run, 0, "", fmt.Errorf("messages: %q names no step slot", subject)
	}
	if episode, err = ParseToken(toks[stepShardLevels+1]); err != nil {
		return run, 0, "", err
	}
	return run, slot, episode, nil
}

// Trajectories is the subject of a run's Trajectories of one env:
// <prefix>.trajectories.<Token(run)>.<Token(env)>.
func (s Subjects) Trajectories(run, env string) string {
	return s.subject("trajectories", Token(run)+"."+Token(env))
}

// TrajectoriesOfRun matches every Trajectory of run.
func (s Subjects) TrajectoriesOfRun(run string) string {
	return s.subject("trajectories", Token(run)+".>")
}

// TrajectoriesAll matches the Trajectories of every env.
func (s Subjects) TrajectoriesAll() string { return s.subject("trajectories", ">") }

// Groups is the subject of a run's Groups of one env: <prefix>.groups.<Token(run)>.<Token(env)>.
func (s Subjects) Groups(run, env string) string {
	return s.subject("groups", Token(run)+"."+Token(env))
}

// GroupsOfRun matches every Group of run.
func (s Subjects) GroupsOfRun(run string) string { return s.subject("groups", Token(run)+".>") }

// GroupsAll matches the Groups of every env.
func (s Subjects) GroupsAll() string { return s.subject("groups", ">") }

// Failures is the subject of a run's Failure records of one kind:
// <prefix>.failures.<Token(run)>.<Token(kind)>. A record of a message that belongs to no
// episode has the empty run.
func (s Subjects) Failures(run, kind string) string {
	return s.subject("failures", Token(run)+"."+Token(kind))
}

// FailuresOfRun matches every Failure record of run.
func (s Subjects) FailuresOfRun(run string) string { return s.subject("failures", Token(run)+".>") }

// FailuresAll matches the Failure records of every kind.
func (s Subjects) FailuresAll() string { return s.subject("failures", ">") }

// StreamEpisodes names the stream holding EpisodesAll, e.g. "RF_EPISODES".
func (s Subjects) StreamEpisodes() string { return s.stream("EPISODES") }

// StreamSteps names the stream holding StepsAll, e.g. "RF_STEPS".
func (s Subjects) StreamSteps() string { return s.stream("STEPS") }

// StreamTrajectories names the stream holding TrajectoriesAll, e.g. "RF_TRAJECTORIES".
func (s Subjects) StreamTrajectories() string { return s.stream("TRAJECTORIES") }

// StreamGroups names the stream holding GroupsAll, e.g. "RF_GROUPS".
func (s Subjects) StreamGroups() string { return s.stream("GROUPS") }

// StreamFailures names the stream holding FailuresAll, e.g. "RF_FAILURES".
func (s Subjects) StreamFailures() string { return s.stream("FAILURES") }

// Decided is the subject of an episode's decision (see DecisionHeader):
// <prefix>.decided.<Token(run)>.<Token(episode)>. Only collectors publish on it.
func (s Subjects) Decided(run, episode string) string {
	return s.subject("decided", Token(run)+"."+Token(episode))
}

// DecidedOfRun matches the decisions of run's episodes.
func (s Subjects) DecidedOfRun(run string) string { return s.subject("decided", Token(run)+".>") }

// DecidedAll matches the decisions of every episode.
func (s Subjects) DecidedAll() string { return s.subject("decided", ">") }

// StreamDecided names the stream holding DecidedAll, e.g. "RF_DECIDED".
func (s Subjects) StreamDecided() string { return s.stream("DECIDED") }

// Control is the subject of the fleet's PolicyState, kept by the control stream:
// <prefix>.control.policy. Only trainers publish on it.
func (s Subjects) Control() string { return s.subject("control", "policy") }

// ControlWorkers is the subject workers answer status requests on with a WorkerStatus:
// <prefix>.control.workers. It is not stored.
func (s Subjects) ControlWorkers() string { return s.subject("control", "workers") }

// StreamControl names the stream keeping Control, e.g. "RF_CONTROL".
func (s Subjects) StreamControl() string { return s.stream("CONTROL") }

// Batch is the subject of a batch's BatchManifest: <prefix>.batches.<Token(batch)>. Only
// trainers publish on it.
func (s Subjects) Batch(batch string) string { return s.subject("batches", Token(batch)) }

// BatchManifests matches the manifest of every batch.
func (s Subjects) BatchManifests() string { return s.subject("batches", "*") }

// BatchProgress is the subject of a trainer's progress mark of one batch, which outcome its
// readers have received: <prefix>.batches.<Token(batch)>.<kind>.<Token(key)>…, one token per
// key. A mark is kept once per subject, so marking again counts once.
func (s Subjects) BatchProgress(batch, kind string, keys ...string) string {
	var b strings.Builder
	b.WriteString(Token(batch) + "." + kind)
	for _, k := range keys {
		b.WriteString("." + Token(k))
	}
	return s.subject("batches", b.String())
}

// BatchProgressOf matches every progress mark of a batch.
func (s Subjects) BatchProgressOf(batch string) string {
	return s.subject("batches", Token(batch)+".>")
}

// BatchesAll matches every batch manifest and progress mark.
func (s Subjects) BatchesAll() string { return s.subject("batches", ">") }

// StreamBatches names the stream holding BatchesAll, e.g. "RF_BATCHES".
func (s Subjects) StreamBatches() string { return s.stream("BATCHES") }

// NameToken makes an id usable in a consumer or file name, which allow no
// '.', '*', '>', whitespace or path separators: a short id of other printable
// ASCII bytes stays as it is, any other becomes its 64-bit FNV-1a hash in hex.
func NameToken(id string) string {
	ok := id != "" && len(id) <= 32
	for i := 0; ok && i < len(id); i++ {
		ok = !escaped(id[i]) && id[i] != '/' && id[i] != '\\'
	}
	if ok {
		return id
	}
	h := fnv.New64a()
	h.Write([]byte(id))
	return fmt.Sprintf("%016x", h.Sum64())
}

// emptyToken stands for the empty string. Every '%' that Token writes for a non-empty string is
// followed by two hex digits, so a lone '%' cannot collide with any other encoding.
const emptyToken = "%"

const upperHex = "0123456789ABCDEF"

// escaped reports whether Token escapes c: the subject separators and wildcards, the escape
// character itself, and every byte that is not printable ASCII (whitespace, controls and the
// bytes of non-ASCII UTF-8, which NATS tooling does not all accept).
func escaped(c byte) bool {
	return c <= ' ' || c >= 0x7f || c == '.' || c == '*' || c == '>' || c == '%'
}

// Token encodes any string as one valid, non-empty NATS subject token. Bytes that cannot appear
// in a token, and '%', become %XX (uppercase hex); other bytes stay as they are; the empty string
// becomes "%". The encoding is injective, so distinct ids never share a subject, and ParseToken
// inverts it. A string that needs no escaping is returned without allocating.
func Token(s string) string {
	if s == "" {
		return emptyToken
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if escaped(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if escaped(c) {
			b.WriteByte('%')
			b.WriteByte(upperHex[c>>4])
			b.WriteByte(upperHex[c&0x0f])
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// ParseToken returns the string that Token encoded as tok. It accepts only Token's exact output,
// so Token(s) == tok whenever it succeeds.
func ParseToken(tok string) (string, error) {
	if tok == emptyToken {
		return "", nil
	}
	if tok == "" {
		return "", fmt.Errorf("messages: subject token is empty")
	}
	var b strings.Builder
	b.Grow(len(tok))
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		if c != '%' {
			if escaped(c) {
				return "", fmt.Errorf("messages: subject token %q: byte %q at %d should be escaped", tok, c, i)
			}
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(tok) {
			return "", fmt.Errorf("messages: subject token %q: truncated escape at %d", tok, i)
		}
		hi, lo := strings.IndexByte(upperHex, tok[i+1]), strings.IndexByte(upperHex, tok[i+2])
		if hi < 0 || lo < 0 || !escaped(byte(hi<<4|lo)) {
			return "", fmt.Errorf("messages: subject token %q: invalid escape %q at %d", tok, tok[i:i+3], i)
		}
		b.WriteByte(byte(hi<<4 | lo))
		i += 2
	}
	return b.String(), nil
}

// StepMsgID is the JetStream de-duplication id of a StepEvent: "<episode>/<run>/<turn>", with
// run the nonce of the delivery that played it (StepEvent.Run). The run and turn follow the last
// two '/', so distinct runs never share an id: a rerun of an episode (a redelivery, or a second
// submission of the same id) never collides with the steps an earlier run stored.
func StepMsgID(episode, run string, turn int32) string {
	return episode + "/" + run + "/" + strconv.FormatInt(int64(turn), 10)
}

// MaxAttempts is the highest attempt number of an honest step by default: env workers give up
// on an episode after --max-deliver (5) deliveries. Steps above it are ignored.
const MaxAttempts int32 = 16

// DecisionHeader and DecisionRunHeader are the headers of an episode's decision, the first
// and only message on its Decided subject, which has no body: the kind of its outcome
// ("trajectory" or a failure kind) and the run it took the outcome from (RunID). A collector
// stores the decision before the outcome, on the condition that none is stored yet, so an
// episode is decided once, whichever collector or run comes first, and every later step,
// redelivery or re-submission of it finds it decided.
const (
	DecisionHeader    = "Rf-Outcome"
	DecisionRunHeader = "Rf-Run"
)

// RunID names one run of an episode in a decision: "<request>/<attempt>/<run>", or a word for a
// decision that no run made (a malformed step).
func RunID(request uint64, attempt int32, run string) string {
	return strconv.FormatUint(request, 10) + "/" + strconv.FormatInt(int64(attempt), 10) + "/" + run
}

// GroupMsgID is the JetStream de-duplication id of a Group: its group id
// scoped by run, as EpisodeMsgID is, so that a group id reused by a later run
// inside the duplicate window is a new group, not a repeat.
func GroupMsgID(run, group string) string { return EpisodeMsgID(run, group) }

// TrajectoryMsgID is the JetStream de-duplication id of a Trajectory: its episode id, since an
// episode has exactly one trajectory.
func TrajectoryMsgID(episode string) string { return episode }
