package toyllm

import (
	"bytes"
	"math/rand/v2"
	"strconv"
	"strings"
)

// The stand-in also plays GEM's board games, less cleverly than
// GuessTheNumber: it recognises the game from its instructions, reads what
// it needs from the latest board in the conversation, and plans a move that
// is usually well formed and legal-looking, sometimes a slip, so that a demo
// run shows a spread of rewards on every game. As for GuessTheNumber, the
// plan is a latent choice made before the tokens are sampled.

// slipRate is how often a board-game reply is deliberately malformed.
const slipRate = 0.08

// boardGames maps a phrase of each game's instructions to its planner.
var boardGames = []struct {
	marker []byte
	plan   func(dst, text []byte, rng *rand.PCG) []byte
}{
	{[]byte("You are playing Mastermind."), planMastermind},
	{[]byte("You are playing the Minesweeper game."), planMinesweeper},
	{[]byte("Sudoku.\nEach row is numbered"), planSudoku},
	{[]byte("You are playing Tower of Hanoi"), planHanoi},
	{[]byte("-Puzzle game."), planSlide},
	{[]byte("You are playing 2048."), planSlide},
	{[]byte("You are solving the Sokoban puzzle."), planSokoban},
}

// appendBoardGamePlan appends a reply for a board game, or reports false
// when the conversation is not one (then it is GuessTheNumber's policy).
func appendBoardGamePlan(dst, text []byte, rng *rand.PCG) ([]byte, bool) {
	first, which := -1, -1
	for i, g := range boardGames {
		if j := bytes.Index(text, g.marker); j >= 0 && (first < 0 || j < first) {
			first, which = j, i
		}
	}
	if which < 0 {
		return dst, false
	}
	return boardGames[which].plan(dst, text, rng), true
}

func slip(rng *rand.PCG) bool { return float64(rng.Uint64()>>11)/(1<<53) < slipRate }

// numberAfter parses the number that follows the first occurrence of marker.
func numberAfter(text []byte, marker string, def int) int {
	i := bytes.Index(text, []byte(marker))
	if i < 0 {
		return def
	}
	v, n := parseNum(text[i+len(marker):])
	if n == 0 {
		return def
	}
	return v
}

// lastBlock returns the text after the last occurrence of marker.
func lastBlock(text []byte, marker string) []byte {
	i := bytes.LastIndex(text, []byte(marker))
	if i < 0 {
		return nil
	}
	return text[i+len(marker):]
}

func appendBox(dst []byte, parts ...string) []byte {
	dst = append(dst, `\boxed{`...)
	for i, p := range parts {
		if i > 0 {
			dst = append(dst, ' ')
		}
		dst = append(dst, p...)
	}
	return append(dst, '}')
}

func planMastermind(dst, text []byte, rng *rand.PCG) []byte {
	n := numberAfter(text, "guess the secret ", 4)
	k := numberAfter(text, "digits from 1 to ", 6)
	n, k = max(1, min(n, 10)), max(1, min(k, 10))
	perm := make([]string, 0, k)
	for i := range k {
		perm = append(perm, strconv.Itoa(i+1))
	}
	for i := len(perm) - 1; i > 0; i-- {
		j := intN(rng, i+1)
		perm[i], perm[j] = perm[j], perm[i]
	}
	code := perm[:min(n, len(perm))]
	dst = append(dst, "My guess: "...)
	if slip(rng) {
		// Commas: a format error in Mastermind.
		return append(append(append(dst, `\boxed{`...), strings.Join(code, ",")...), '}')
	}
	return appendBox(dst, code...)
}

// boardRows reads the rows of a board: the lines isRow accepts, up to the
// first blank line after them, each a row label (" 3", "R3") and then cells
// separated by spaces; box separators ("|") are skipped.
func boardRows(block []byte, isRow func(line []byte) bool) [][][]byte {
	var rows [][][]byte
	for _, line := range bytes.Split(block, []byte("\n")) {
		if !isRow(line) {
			if len(rows) > 0 && len(bytes.TrimSpace(line)) == 0 {
				break
			}
			continue
		}
		var cells [][]byte
		for i, f := range bytes.Fields(line) {
			if i == 0 || bytes.Equal(f, []byte("|")) {
				continue // the row label, a box separator
			}
			cells = append(cells, f)
		}
		rows = append(rows, cells)
	}
	return rows
}

func planMinesweeper(dst, text []byte, rng *rand.PCG) []byte {
	rows := boardRows(lastBlock(text, "Here is the current board layout:\n"), func(l []byte) bool {
		f := bytes.Fields(l)
		return len(f) > 1 && f[0][0] >= '0' && f[0][0] <= '9' && !bytes.HasPrefix(l, []byte("    "))
	})
	var hidden [][2]int
	for r, row := range rows {
		for c, cell := range row {
			if bytes.Equal(cell, []byte(".")) {
				hidden = append(hidden, [2]int{r, c})
			}
		}
	}
	r, c := intN(rng, 5), intN(rng, 5)
	if len(hidden) > 0 && !slip(rng) {
		rc := hidden[intN(rng, len(hidden))]
		r, c = rc[0], rc[1]
	}
	cmd := "reveal"
	if intN(rng, 10) == 0 {
		cmd = "flag"
	}
	dst = append(dst, "Let me open a safe-looking cell. "...)
	return appendBox(dst, cmd, strconv.Itoa(r), strconv.Itoa(c))
}

func planSudoku(dst, text []byte, rng *rand.PCG) []byte {
	rows := boardRows(lastBlock(text, "Here is the current board layout:\n"), func(l []byte) bool {
		return len(l) > 1 && l[0] == 'R' && l[1] >= '0' && l[1] <= '9'
	})
	size := len(rows)
	if size == 0 {
		return appendBox(append(dst, "I place "...), "1", "1", "1")
	}
	var empty [][2]int
	for r, row := range rows {
		for c, cell := range row {
			if bytes.Equal(cell, []byte(".")) {
				empty = append(empty, [2]int{r, c})
			}
		}
	}
	if len(empty) == 0 || slip(rng) {
		return appendBox(append(dst, "I place "...), "1", "1", strconv.Itoa(1+intN(rng, max(size, 1))))
	}
	rc := empty[intN(rng, len(empty))]
	// A number its row and column do not have yet, when there is one.
	used := map[string]bool{}
	for _, cell := range rows[rc[0]] {
		used[string(cell)] = true
	}
	for _, row := range rows {
		if rc[1] < len(row) {
			used[string(row[rc[1]])] = true
		}
	}
	var free []int
	for v := 1; v <= size; v++ {
		if !used[strconv.Itoa(v)] {
			free = append(free, v)
		}
	}
	v := 1 + intN(rng, size)
	if len(free) > 0 {
		v = free[intN(rng, len(free))]
	}
	dst = append(dst, "Filling an empty cell. "...)
	return appendBox(dst, strconv.Itoa(rc[0]+1), strconv.Itoa(rc[1]+1), strconv.Itoa(v))
}

func planHanoi(dst, text []byte, rng *rand.PCG) []byte {
	block := lastBlock(text, "Here is the current state of the tower of hanoi:\n")
	tops := map[byte]int{} // the top disk of each tower, 0 when empty
	for _, line := range bytes.Split(block, []byte("\n")) {
		if len(line) < 4 || line[1] != ':' || line[0] < 'A' || line[0] > 'C' {
			continue
		}
		disks := bytes.Trim(bytes.TrimSpace(line[2:]), "[]")
		if _, seen := tops[line[0]]; seen {
			continue
		}
		tops[line[0]] = 0
		if f := bytes.Split(disks, []byte(", ")); len(disks) > 0 {
			v, _ := parseNum(f[len(f)-1])
			tops[line[0]] = v
		}
	}
	var legal [][2]byte
	for _, from := range []byte("ABC") {
		for _, to := range []byte("ABC") {
			if from != to && tops[from] > 0 && (tops[to] == 0 || tops[to] > tops[from]) {
				legal = append(legal, [2]byte{from, to})
			}
		}
	}
	move := [2]byte{"ABC"[intN(rng, 3)], "ABC"[intN(rng, 3)]}
	if len(legal) > 0 && !slip(rng) {
		move = legal[intN(rng, len(legal))]
	}
	dst = append(dst, "Moving a disk. "...)
	return appendBox(dst, string(move[0]), string(move[1]))
}

// planSlide plays FifteenPuzzle and 2048, whose moves are directions.
func planSlide(dst, text []byte, rng *rand.PCG) []byte {
	dirs := [...]string{"up", "down", "left", "right"}
	d := dirs[intN(rng, len(dirs))]
	if slip(rng) {
		d = "Up " // neither game parses it
	}
	dst = append(dst, "I slide "...)
	dst = append(dst, d...)
	dst = append(dst, ". "...)
	return appendBox(dst, d)
}

// sokobanDirs are Sokoban's moves and their (row, col) steps.
var sokobanDirs = [4]struct {
	name   string
	dr, dc int
}{{"up", -1, 0}, {"down", 1, 0}, {"left", 0, -1}, {"right", 0, 1}}

// sokobanBoard is the latest Sokoban board of a conversation, one symbol a
// cell: '#' wall, '_' floor, 'O' empty target, 'X' box, 'V' box on a target
// (drawn "√"), 'P' the player.
type sokobanBoard [][]byte

// readSokobanBoard reads the rows after the last board header, up to the
// blank line that ends them.
func readSokobanBoard(text []byte) sokobanBoard {
	var rows sokobanBoard
	for _, line := range bytes.Split(lastBlock(text, "Here is the current board layout:\n"), []byte("\n")) {
		f := bytes.Fields(line)
		if len(f) == 0 {
			break
		}
		row := make([]byte, len(f))
		for i, sym := range f {
			row[i] = sym[0]
			if string(sym) == "√" {
				row[i] = 'V'
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// at is the symbol on (r, c), a wall off the board.
func (b sokobanBoard) at(r, c int) byte {
	if r < 0 || r >= len(b) || c < 0 || c >= len(b[r]) {
		return '#'
	}
	return b[r][c]
}

// free reports whether the player or a box can move onto (r, c).
func (b sokobanBoard) free(r, c int) bool {
	v := b.at(r, c)
	return v == '_' || v == 'O' || v == 'P'
}

// stuck reports whether a box on (r, c), off a target, could never leave
// it: a wall above or below and one to the side.
func (b sokobanBoard) stuck(r, c int) bool {
	return b.at(r, c) != 'O' && (b.at(r-1, c) == '#' || b.at(r+1, c) == '#') && (b.at(r, c-1) == '#' || b.at(r, c+1) == '#')
}

// targetDistance is the Manhattan distance from (r, c) to the nearest empty
// target, or -1 when there is none.
func (b sokobanBoard) targetDistance(r, c int) int {
	best := -1
	for tr, row := range b {
		for tc, v := range row {
			if d := max(tr-r, r-tr) + max(tc-c, c-tc); v == 'O' && (best < 0 || d < best) {
				best = d
			}
		}
	}
	return best
}

// planSokoban plays greedily: of the pushes the player can walk to that
// bring a box closer to an empty target without wedging it in a corner, it
// picks the one with the shortest walk and takes the first step toward it.
// Sometimes it wanders instead, so episodes differ, and sometimes it slips.
func planSokoban(dst, text []byte, rng *rand.PCG) []byte {
	if slip(rng) {
		return append(dst, `I go \boxed{north}`...) // not a direction: a format error
	}
	b := readSokobanBoard(text)
	dir := sokobanDirs[intN(rng, len(sokobanDirs))].name
	if pr, pc, ok := b.player(); ok && intN(rng, 8) != 0 {
		if d, ok := b.bestStep(pr, pc); ok {
			dir = d
		}
	}
	dst = append(dst, "I move "...)
	dst = append(dst, dir...)
	dst = append(dst, ". "...)
	return appendBox(dst, dir)
}

// player finds P on the board.
func (b sokobanBoard) player() (r, c int, ok bool) {
	for r, row := range b {
		if c := bytes.IndexByte(row, 'P'); c >= 0 {
			return r, c, true
		}
	}
	return 0, 0, false
}

// bestStep is the first move toward the best push from (pr, pc), or false
// when no push helps.
func (b sokobanBoard) bestStep(pr, pc int) (string, bool) {
	// Breadth first over free cells: the walk length to each cell and the
	// move that starts the walk.
	type cell struct{ r, c int }
	dist := map[cell]int{{pr, pc}: 0}
	first := map[cell]int{}
	queue := []cell{{pr, pc}}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for i, d := range sokobanDirs {
			next := cell{cur.r + d.dr, cur.c + d.dc}
			if _, seen := dist[next]; seen || !b.free(next.r, next.c) {
				continue
			}
			dist[next] = dist[cur] + 1
			first[next] = i
			if cur != (cell{pr, pc}) {
				first[next] = first[cur]
			}
			queue = append(queue, next)
		}
	}
	bestWalk, bestMove := -1, 0
	for r, row := range b {
		for c, v := range row {
			if v != 'X' {
				continue
			}
			now := b.targetDistance(r, c)
			for i, d := range sokobanDirs {
				to, from := cell{r + d.dr, c + d.dc}, cell{r - d.dr, c - d.dc}
				walk, reachable := dist[from]
				if !reachable || !b.free(to.r, to.c) || b.stuck(to.r, to.c) {
					continue
				}
				if after := b.targetDistance(to.r, to.c); after < 0 || after >= now {
					continue
				}
				if bestWalk < 0 || walk < bestWalk {
					bestWalk, bestMove = walk, i
					if walk > 0 {
						bestMove = first[from]
					}
				}
			}
		}
	}
	if bestWalk < 0 {
		return "", false
	}
	return sokobanDirs[bestMove].name, true
}
