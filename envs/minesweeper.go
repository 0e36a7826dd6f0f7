package envs

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

const (
	minesweeperFamily = "Minesweeper"
	// minesweeperMaxCells bounds rows*cols so that a constructor override
	// cannot make the env allocate without limit; GEM has no bound.
	minesweeperMaxCells = 1 << 16
)

// minesweeperInstructions is GEM's instruction text; its verbs are the reveal
// example row and col (twice), then the flag example row and col (twice).
const minesweeperInstructions = `You are playing the Minesweeper game.
The objective of the game is to reveal all cells that do not contain mines.
To make a move, you can either reveal a cell or place a flag on a suspected mine location using one of the following commands:
- 'reveal': Reveal the contents of a specific cell.
- 'flag': Place or remove a flag on a specific cell to mark it as a potential mine.
To submit your move, type the command followed by the row and column in \boxed{}.
For example:
- \boxed{reveal %d %d} to reveal the cell in Row %d, Column %d.
- \boxed{flag %d %d} to place or remove a flag on the cell in Row %d, Column %d.
The current board layout is shown below. Cells that are unrevealed are represented by a dot ('.'), revealed numbers show the count of adjacent mines, and flagged cells are marked with an 'F'.
Use logic and deduction to avoid revealing cells with mines!
Be mindful not to choose revealed or flagged cells.
`

// minesweeperSpecs is the Minesweeper family's list of registered ids.
func minesweeperSpecs() []Spec {
	return []Spec{
		minesweeperSpec("game:Minesweeper-v0-easy", map[string]any{"rows": 5, "cols": 5, "num_mines": 5, "max_turns": 25}, 25),
		minesweeperSpec("game:Minesweeper-v0-hard", map[string]any{"rows": 8, "cols": 8, "num_mines": 12, "max_turns": 64}, 64),
		minesweeperSpec("game:Minesweeper-v0-random", map[string]any{"rows": nil, "cols": nil, "num_mines": nil, "max_turns": nil}, 0),
	}
}

// minesweeperSpec builds a registry row. The chat suffix is empty because
// GEM's suffix is the dynamic board, which is not known when the row is built.
func minesweeperSpec(id string, params map[string]any, maxTurns int) Spec {
	return gameSpec(id, minesweeperFamily, "", params, maxTurns, newMinesweeper)
}

// minesweeperCell is a (row, col) cell of the board.
type minesweeperCell = gridCell

// minesweeperState is the whole game state; its JSON form is the snapshot.
// Cell lists are kept in row-major order.
type minesweeperState struct {
	Rows     int `json:"rows"`
	Cols     int `json:"cols"`
	NumMines int `json:"num_mines"`
	MaxTurns int `json:"max_turns"`
	Turn     int `json:"turn_count"`
	// FirstReveal is true until the first in-bounds reveal places the mines.
	FirstReveal bool `json:"first_reveal"`
	// Mines is the layout. Before the first reveal it is either empty (drawn
	// from MineOrder at the first reveal) or an injected layout used as is.
	Mines    []minesweeperCell `json:"mines"`
	Revealed []minesweeperCell `json:"revealed"`
	Flagged  []minesweeperCell `json:"flagged"`
	// MineOrder is a permutation of the cell indices (row*cols+col) drawn at
	// reset: the first reveal takes the first num_mines cells of it outside
	// the 3x3 block around the revealed cell. A filtered uniform permutation
	// gives a uniform choice among those cells, like GEM's rejection
	// sampling, and drawing it at reset keeps Step free of randomness so a
	// snapshot holds every future draw.
	MineOrder     []int           `json:"mine_order"`
	RevealExample minesweeperCell `json:"reveal_example"`
	FlagExample   minesweeperCell `json:"flag_example"`
	// Random makes every Reset draw the board size, mine count and turn limit.
	Random bool `json:"random"`
}

// minesweeper is GEM's MinesweeperEnv. The grids mirror s's cell lists for
// constant-time lookups; Step updates both, Restore rebuilds the grids.
type minesweeper struct {
	s        minesweeperState
	mine     []bool
	revealed []bool
	flagged  []bool
}

// newMinesweeper applies the overrides to the registered parameters. As in
// GEM, a null parameter makes the env draw all four at every reset, and
// unknown keys are ignored.
func newMinesweeper(registered map[string]any, opts map[string]json.RawMessage) (Env, error) {
	p, err := overrideIntParams(registered, opts)
	if err != nil {
		return nil, err
	}
	rows, rowsOK := p["rows"].(int)
	cols, colsOK := p["cols"].(int)
	numMines, minesOK := p["num_mines"].(int)
	maxTurns, turnsOK := p["max_turns"].(int)
	s := minesweeperState{
		Rows: rows, Cols: cols, NumMines: numMines, MaxTurns: maxTurns,
		FirstReveal: true,
		Mines:       []minesweeperCell{},
		Revealed:    []minesweeperCell{},
		Flagged:     []minesweeperCell{},
		MineOrder:   []int{},
		Random:      !rowsOK || !colsOK || !minesOK || !turnsOK,
	}
	if !s.Random {
		if err := s.validateConfig(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadOption, err)
		}
		// An identity order keeps a fixed-size env usable before the first
		// Reset; Reset replaces it with a random one.
		s.MineOrder = minesweeperIdentity(rows * cols)
	}
	g := &minesweeper{s: s}
	g.syncGrids()
	return g, nil
}

// Reset draws, in GEM's order: the parameters (random variant only), the
// reveal example, the flag example; then the mine order, which GEM draws
// later, at the first reveal.
func (g *minesweeper) Reset(rng *rand.Rand) (string, Info) {
	s := &g.s
	if s.Random {
		n := uniformInt(rng, 5, 8)
		s.Rows, s.Cols, s.NumMines, s.MaxTurns = n, n, n*n/5, n*n
	}
	s.RevealExample = minesweeperCell{uniformInt(rng, 0, s.Rows-1), uniformInt(rng, 0, s.Cols-1)}
	s.FlagExample = minesweeperCell{uniformInt(rng, 0, s.Rows-1), uniformInt(rng, 0, s.Cols-1)}
	s.MineOrder = rng.Perm(s.Rows * s.Cols)
	s.Turn = 0
	s.FirstReveal = true
	s.Mines = []minesweeperCell{}
	s.Revealed = []minesweeperCell{}
	s.Flagged = []minesweeperCell{}
	g.syncGrids()
	return g.Instructions(), g.Info()
}

// Step follows GEM's order of checks: format error, bounds (before the
// command word), then reveal (placing the mines on the first one; a mine
// ends the game at once, then revealed-or-flagged, then flood reveal and the
// win check) or flag, then an unknown word, and finally the turn limit,
// which replaces the feedback line but keeps the step's reward.
func (g *minesweeper) Step(action string) StepResult {
	s := &g.s
	s.Turn++
	t := s.Turn
	word, rowText, colText, ok := parseMinesweeperAction(action)
	if !ok {
		return formatErrorResult(fmt.Sprintf("At turn %d, you did not provide a valid guess.", t), t, s.MaxTurns, g.Info())
	}
	row, rowErr := strconv.Atoi(rowText)
	col, colErr := strconv.Atoi(colText)
	var obs string
	reward := rewardStep
	switch {
	case rowErr != nil || colErr != nil || row >= s.Rows || col >= s.Cols: // a value too large for int is out of bounds
		obs = fmt.Sprintf("At turn %d, you chose cell (%s, %s), which is outside the bounds of the grid.", t, rowText, colText)
	case word == "reveal":
		if s.FirstReveal {
			g.placeMines(row, col)
		}
		i := row*s.Cols + col
		switch {
		case g.mine[i]: // even when flagged
			return StepResult{
				Observation: fmt.Sprintf("Game over! You hit a mine at (%d, %d)", row, col),
				Reward:      0, // GEM's fail reward
				Terminated:  true,
				Info:        g.Info(),
			}
		case g.revealed[i] || g.flagged[i]:
			obs = fmt.Sprintf("At turn %d, you chose to reveal cell (%d, %d), which has already been revealed.", t, row, col)
		default:
			k := g.floodReveal(row, col)
			reward = float64(k) / float64(s.Rows*s.Cols-s.NumMines)
			if g.won() {
				return StepResult{
					Observation: "Congratulations! You have successfully cleared the Minesweeper board.",
					Reward:      reward,
					Terminated:  true,
					Won:         true,
					Info:        g.Info(),
				}
			}
			obs = fmt.Sprintf("At turn %d, you successfully revealed cell (%d, %d).", t, row, col)
		}
	case word == "flag":
		i := row*s.Cols + col
		switch {
		case g.revealed[i]:
			obs = fmt.Sprintf("At turn %d, you chose to flag cell (%d, %d), which has already been revealed.", t, row, col)
		case g.flagged[i]:
			g.flagged[i] = false
			obs = fmt.Sprintf("At turn %d, you removed a flag on cell (%d, %d).", t, row, col)
		default:
			g.flagged[i] = true
			obs = fmt.Sprintf("At turn %d, you added a flag on cell (%d, %d).", t, row, col)
		}
		s.Flagged = minesweeperCells(g.flagged, s.Cols)
	default:
		obs = fmt.Sprintf("At turn %d, you chose an invalid action '%s'. Valid actions are 'reveal' or 'flag'.", t, word)
	}
	if t >= s.MaxTurns {
		return turnLimitResult(turnLimitMessage, reward, g.Info())
	}
	return StepResult{Observation: obs, Reward: reward, Info: g.Info()}
}

// parseMinesweeperAction returns the lowercased command word and the row and
// col as canonical decimal from the last match of GEM's pattern
//
//	\\boxed\{([A-Za-z]+)\s(\d+)\s(\d+)\}
//
// with Python's Unicode \s and \d. ok is false for no match or a digit run
// Python's int() refuses.
//
// It is hand-written because Go's regexp costs about 200ns a byte with
// submatches. A match holds one backslash, at its start, so matches never
// overlap and the last one is the last "\boxed{" where the rest matches;
// each try stops before the next backslash, so the scan stays linear.
func parseMinesweeperAction(action string) (word, row, col string, ok bool) {
	const open = `\boxed{`
	for end := len(action); ; {
		p := strings.LastIndex(action[:end], open)
		if p < 0 {
			return "", "", "", false
		}
		if w, r, c, matched := minesweeperMatchAt(action[p+len(open):]); matched {
			row, rowOK := pyInt(r)
			col, colOK := pyInt(c)
			if !rowOK || !colOK {
				return "", "", "", false
			}
			return strings.ToLower(w), row, col, true // the word is ASCII letters only
		}
		end = p
	}
}

// minesweeperMatchAt matches the rest of the pattern after "\boxed{" at the
// start of s: letters, one whitespace, digits, one whitespace, digits, "}".
func minesweeperMatchAt(s string) (word, row, col string, ok bool) {
	n := 0
	for n < len(s) && ('a' <= s[n] && s[n] <= 'z' || 'A' <= s[n] && s[n] <= 'Z') {
		n++
	}
	if n == 0 {
		return "", "", "", false
	}
	word, s = s[:n], s[n:]
	if s, ok = minesweeperSkipSpace(s); !ok {
		return "", "", "", false
	}
	n = skipRunes(s, isPyDigit)
	if row, s = s[:n], s[n:]; row == "" {
		return "", "", "", false
	}
	if s, ok = minesweeperSkipSpace(s); !ok {
		return "", "", "", false
	}
	n = skipRunes(s, isPyDigit)
	if col, s = s[:n], s[n:]; col == "" || !strings.HasPrefix(s, "}") {
		return "", "", "", false
	}
	return word, row, col, true
}

// minesweeperSkipSpace consumes exactly one Python whitespace character.
func minesweeperSkipSpace(s string) (rest string, ok bool) {
	r, size := utf8.DecodeRuneInString(s)
	if !isPySpace(r) {
		return s, false
	}
	return s[size:], true
}

// placeMines fixes the layout at the first in-bounds reveal: an injected
// layout is kept, otherwise the first num_mines cells of the mine order
// outside the 3x3 block around (row, col) become mines.
func (g *minesweeper) placeMines(row, col int) {
	s := &g.s
	s.FirstReveal = false
	if len(s.Mines) == s.NumMines {
		return
	}
	placed := 0
	for _, i := range s.MineOrder {
		if placed == s.NumMines {
			break
		}
		if r, c := i/s.Cols, i%s.Cols; r < row-1 || r > row+1 || c < col-1 || c > col+1 {
			g.mine[i] = true
			placed++
		}
	}
	s.Mines = minesweeperCells(g.mine, s.Cols)
}

// floodReveal reveals (row, col) and, breadth first, every unflagged
// neighbour of a revealed zero; it returns the number of newly revealed cells.
func (g *minesweeper) floodReveal(row, col int) int {
	s := &g.s
	g.revealed[row*s.Cols+col] = true
	k := 1
	queue := []minesweeperCell{{row, col}}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if g.count(cur[0], cur[1]) != 0 {
			continue
		}
		for r := max(cur[0]-1, 0); r <= min(cur[0]+1, s.Rows-1); r++ {
			for c := max(cur[1]-1, 0); c <= min(cur[1]+1, s.Cols-1); c++ {
				if i := r*s.Cols + c; !g.revealed[i] && !g.flagged[i] {
					g.revealed[i] = true
					k++
					queue = append(queue, minesweeperCell{r, c})
				}
			}
		}
	}
	s.Revealed = minesweeperCells(g.revealed, s.Cols)
	return k
}

// count is the number of mines among the 8 neighbours of (row, col).
func (g *minesweeper) count(row, col int) int {
	s := &g.s
	n := 0
	for r := max(row-1, 0); r <= min(row+1, s.Rows-1); r++ {
		for c := max(col-1, 0); c <= min(col+1, s.Cols-1); c++ {
			if (r != row || c != col) && g.mine[r*s.Cols+c] {
				n++
			}
		}
	}
	return n
}

// won is GEM's win check: every mine flagged and every other cell revealed.
func (g *minesweeper) won() bool {
	for i, m := range g.mine {
		if m && !g.flagged[i] || !m && !g.revealed[i] {
			return false
		}
	}
	return true
}

// info renders GEM's suffix: the board and the call to action.
func (g *minesweeper) Info() Info {
	s := &g.s
	var b strings.Builder
	b.WriteString("Here is the current board layout:\n   ")
	for c := range s.Cols {
		if c > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%2d", c)
	}
	b.WriteByte('\n')
	for r := range s.Rows {
		fmt.Fprintf(&b, "%2d ", r)
		for c := range s.Cols {
			i := r*s.Cols + c
			sym := "."
			switch {
			case g.revealed[i]: // a revealed mine would be '*', but hitting a mine never reveals it
				sym = strconv.Itoa(g.count(r, c))
			case g.flagged[i]:
				sym = "F"
			}
			b.WriteString(" " + sym + " ")
		}
		b.WriteByte('\n')
	}
	b.WriteString("\nEnter your guess.")
	return Info{"suffix": b.String()}
}

// Instructions renders GEM's instruction text for the current examples.
func (g *minesweeper) Instructions() string {
	re, fl := g.s.RevealExample, g.s.FlagExample
	return fmt.Sprintf(minesweeperInstructions, re[0], re[1], re[0], re[1], fl[0], fl[1], fl[0], fl[1])
}

// Snapshot returns the state as a JSON object with the keys of minesweeperState.
func (g *minesweeper) Snapshot() json.RawMessage {
	b, _ := json.Marshal(g.s) // cannot fail: ints, bools and int slices
	return b
}

// Restore overrides the keys present in state, then validates the result as a
// whole; on any error the env keeps its previous state.
func (g *minesweeper) Restore(state json.RawMessage) error {
	if err := restoreState(minesweeperFamily, &g.s, state, nil); err != nil {
		return err
	}
	g.settle()
	return nil
}

// settle puts a restored state's cells in canonical row-major order, so the
// snapshot does not depend on how the caller listed them, and rebuilds the
// lookup grids.
func (g *minesweeper) settle() {
	for _, cells := range [][]minesweeperCell{g.s.Mines, g.s.Revealed, g.s.Flagged} {
		slices.SortFunc(cells, minesweeperCompare)
	}
	g.syncGrids()
}

// fromState lays state over the constructor's state. The mines, or the
// mine order that places them at the first reveal, must be given. For a
// drawn board, rows or cols must be given (the other is the same, as GEM
// draws square boards), num_mines is the number of mines given or else
// rows*cols/5, and max_turns is rows*cols. first_reveal follows from the
// revealed cells, and the examples default to the first and last cells.
func (g *minesweeper) fromState(state json.RawMessage) (Info, error) {
	if err := startState(minesweeperFamily, &g.s, g.s.Random, state); err != nil {
		return nil, err
	}
	g.settle()
	return g.Info(), nil
}

// derive fills in the keys a partial state leaves out, or names the first
// one it must give; drawn says whether the env draws its board at reset.
func (s *minesweeperState) derive(obj map[string]json.RawMessage, drawn bool) error {
	if drawn {
		switch {
		case has(obj, "rows") && !has(obj, "cols"):
			s.Cols = s.Rows
		case has(obj, "cols") && !has(obj, "rows"):
			s.Rows = s.Cols
		case !has(obj, "rows"):
			return errMissing("rows", "this env draws the board size at reset")
		}
		if !has(obj, "num_mines") {
			if has(obj, "mines") {
				s.NumMines = len(s.Mines)
			} else {
				s.NumMines = s.Rows * s.Cols / 5
			}
		}
		if !has(obj, "max_turns") {
			s.MaxTurns = s.Rows * s.Cols
		}
	}
	switch {
	case !has(obj, "mines") && !has(obj, "mine_order"):
		return errMissing("mines", "the mine layout decides play; give mines, or mine_order to place them at the first reveal")
	case !has(obj, "mine_order"):
		s.MineOrder = []int{} // the given layout is used as is
	case !has(obj, "mines"):
		s.Mines = []minesweeperCell{}
	}
	if !has(obj, "first_reveal") {
		s.FirstReveal = len(s.Revealed) == 0
	}
	if !has(obj, "reveal_example") {
		s.RevealExample = minesweeperCell{0, 0}
	}
	if !has(obj, "flag_example") {
		s.FlagExample = minesweeperCell{s.Rows - 1, s.Cols - 1}
	}
	return nil
}

// overlay returns a copy of s with the keys of obj decoded over it.
func (s minesweeperState) overlay(obj map[string]json.RawMessage) (minesweeperState, error) {
	next := s
	// Decoding must not write into the live slices.
	next.Mines = slices.Clone(s.Mines)
	next.Revealed = slices.Clone(s.Revealed)
	next.Flagged = slices.Clone(s.Flagged)
	next.MineOrder = slices.Clone(s.MineOrder)
	fields := map[string]any{
		"rows":           &next.Rows,
		"cols":           &next.Cols,
		"num_mines":      &next.NumMines,
		"max_turns":      &next.MaxTurns,
		"turn_count":     &next.Turn,
		"first_reveal":   &next.FirstReveal,
		"mines":          &next.Mines,
		"revealed":       &next.Revealed,
		"flagged":        &next.Flagged,
		"mine_order":     &next.MineOrder,
		"reveal_example": &next.RevealExample,
		"flag_example":   &next.FlagExample,
		"random":         &next.Random,
	}
	if err := restoreFields(minesweeperFamily, obj, fields); err != nil {
		return minesweeperState{}, err
	}
	return next, nil
}

// validateConfig checks the board size, mine count and turn limit. Too many
// mines would make GEM's placement loop forever for some first reveals; the
// worst case is a reveal whose 3x3 block lies wholly on the board.
func (s *minesweeperState) validateConfig() error {
	switch {
	case s.Rows < 1:
		return fmt.Errorf("rows: must be at least 1, got %d", s.Rows)
	case s.Cols < 1:
		return fmt.Errorf("cols: must be at least 1, got %d", s.Cols)
	case s.Rows > minesweeperMaxCells/s.Cols:
		return fmt.Errorf("rows: %d rows of %d cols exceed %d cells", s.Rows, s.Cols, minesweeperMaxCells)
	case s.NumMines < 0:
		return fmt.Errorf("num_mines: must not be negative, got %d", s.NumMines)
	case s.NumMines > s.Rows*s.Cols-min(s.Rows, 3)*min(s.Cols, 3):
		return fmt.Errorf("num_mines: %d do not fit outside a first reveal's 3x3 block on %dx%d", s.NumMines, s.Rows, s.Cols)
	case s.MaxTurns < 1:
		return errMaxTurns(s.MaxTurns)
	}
	return nil
}

// validate checks the invariants Step, Instructions and the rendering rely
// on, naming the offending key.
func (s *minesweeperState) validate() error {
	if err := s.validateConfig(); err != nil {
		return err
	}
	n := s.Rows * s.Cols
	switch {
	case s.Turn < 0:
		return errTurnCount(s.Turn)
	case !s.inBounds(s.RevealExample):
		return fmt.Errorf("reveal_example: %v is outside the %dx%d board", s.RevealExample, s.Rows, s.Cols)
	case !s.inBounds(s.FlagExample):
		return fmt.Errorf("flag_example: %v is outside the %dx%d board", s.FlagExample, s.Rows, s.Cols)
	case len(s.MineOrder) != 0 && len(s.MineOrder) != n:
		return fmt.Errorf("mine_order: want a permutation of 0..%d, got %d entries", n-1, len(s.MineOrder))
	}
	seen := make([]bool, n)
	for _, i := range s.MineOrder {
		if i < 0 || i >= n || seen[i] {
			return fmt.Errorf("mine_order: want a permutation of 0..%d, got %v", n-1, s.MineOrder)
		}
		seen[i] = true
	}
	mine, err := s.grid("mines", s.Mines)
	if err != nil {
		return err
	}
	revealed, err := s.grid("revealed", s.Revealed)
	if err != nil {
		return err
	}
	flagged, err := s.grid("flagged", s.Flagged)
	if err != nil {
		return err
	}
	switch {
	case len(s.Mines) != s.NumMines && (!s.FirstReveal || len(s.Mines) != 0):
		return fmt.Errorf("mines: want %d cells, got %d", s.NumMines, len(s.Mines))
	case s.FirstReveal && len(s.Mines) == 0 && s.NumMines > 0 && len(s.MineOrder) == 0:
		return fmt.Errorf("mine_order: needed to place %d mines at the first reveal", s.NumMines)
	case s.FirstReveal && len(s.Revealed) != 0:
		return fmt.Errorf("revealed: no cell is revealed before the first reveal, got %v", s.Revealed)
	}
	for i := range n {
		switch {
		case revealed[i] && mine[i]:
			return fmt.Errorf("revealed: (%d, %d) is a mine", i/s.Cols, i%s.Cols)
		case revealed[i] && flagged[i]:
			return fmt.Errorf("flagged: (%d, %d) is revealed", i/s.Cols, i%s.Cols)
		}
	}
	return nil
}

// grid turns a cell list into a row-major grid, refusing cells off the board
// and cells listed twice.
func (s *minesweeperState) grid(key string, cells []minesweeperCell) ([]bool, error) {
	g := make([]bool, s.Rows*s.Cols)
	for _, c := range cells {
		if !s.inBounds(c) {
			return nil, fmt.Errorf("%s: %v is outside the %dx%d board", key, c, s.Rows, s.Cols)
		}
		i := c[0]*s.Cols + c[1]
		if g[i] {
			return nil, fmt.Errorf("%s: %v appears twice", key, c)
		}
		g[i] = true
	}
	return g, nil
}

func (s *minesweeperState) inBounds(c minesweeperCell) bool {
	return 0 <= c[0] && c[0] < s.Rows && 0 <= c[1] && c[1] < s.Cols
}

// syncGrids rebuilds the lookup grids from the state's cell lists, which
// validate or the constructor have already checked.
func (g *minesweeper) syncGrids() {
	s := &g.s
	n := max(s.Rows*s.Cols, 0)
	g.mine, g.revealed, g.flagged = make([]bool, n), make([]bool, n), make([]bool, n)
	for _, l := range []struct {
		cells []minesweeperCell
		grid  []bool
	}{{s.Mines, g.mine}, {s.Revealed, g.revealed}, {s.Flagged, g.flagged}} {
		for _, c := range l.cells {
			l.grid[c[0]*s.Cols+c[1]] = true
		}
	}
}

// minesweeperCells lists the set cells of a grid in row-major order.
func minesweeperCells(grid []bool, cols int) []minesweeperCell {
	cells := []minesweeperCell{}
	for i, set := range grid {
		if set {
			cells = append(cells, minesweeperCell{i / cols, i % cols})
		}
	}
	return cells
}

func minesweeperCompare(a, b minesweeperCell) int {
	if a[0] != b[0] {
		return a[0] - b[0]
	}
	return a[1] - b[1]
}

// minesweeperIdentity is the mine order 0, 1, ..., n-1.
func minesweeperIdentity(n int) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	return order
}

// Turn is the number of steps taken since Reset.
func (g *minesweeper) Turn() int { return g.s.Turn }

// MaxTurns is the current turn limit (0 before the first Reset of the random variant).
func (g *minesweeper) MaxTurns() int { return g.s.MaxTurns }
