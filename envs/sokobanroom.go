package envs

import "math/rand/v2"

// sokobanMasks are GEM's five 3x3 floor stamps, as (row, col) offsets from
// the centre; each holds the centre and is connected, so the stamped floor
// along the walk is one connected area.
var sokobanMasks = [5][]sokobanPos{
	{{0, -1}, {0, 0}, {0, 1}},
	{{-1, 0}, {0, 0}, {1, 0}},
	{{0, -1}, {0, 0}, {1, 0}},
	{{0, -1}, {0, 0}, {1, -1}, {1, 0}},
	{{0, 0}, {0, 1}, {1, 0}},
}

// sokobanGenerate makes a solvable room the way GEM does: a random walk
// carves the floor, the player and the targets go on random floor cells,
// and then the boxes start on the targets and are pulled away by random
// reverse play. Every pull undoes a push, so playing the walk backwards
// solves the room; a walk is at most max_turns moves long, so the room is
// solvable within the turn limit. Of all the states the walks pass through
// with every target uncovered, the one with the highest GEM score wins:
// box switches times the boxes' distance from their targets. A room whose
// walks never uncover every target is dropped, and after sokobanTries
// rooms (fewer when the walks are long, by sokobanMoveBudget) the fixed
// fallback room is used; generated reports which.
func sokobanGenerate(rng *rand.Rand, rows, cols, numBoxes, maxTurns int) (fixed [][]int, boxes []sokobanPos, player sokobanPos, generated bool) {
	g := sokobanGen{
		rng: rng, rows: rows, cols: cols, numBoxes: numBoxes,
		moves:   min(maxTurns, sokobanMaxWalk),
		cells:   make([]int8, rows*cols),
		boxAt:   make([]int8, rows*cols),
		targets: make([]int, numBoxes),
		boxes:   make([]int, numBoxes),
		best:    make([]int, numBoxes),
		steps:   [4]int{-cols, cols, -1, 1},
		seen:    make([]uint32, rows*cols),
		first:   make([]int, rows*cols),
	}
	for i := range g.boxAt {
		g.boxAt[i] = -1
	}
	for range min(sokobanTries, max(1, sokobanMoveBudget/(sokobanWalks*g.moves))) {
		if g.try() {
			return g.room()
		}
	}
	fixed, boxes, player = sokobanFallback(rows, cols, numBoxes)
	return fixed, boxes, player, false
}

// sokobanGen is the generator's scratch state over the room's cells in
// row-major order (index r*cols+c). The border is always wall and the
// player and boxes stay inside it, so a neighbour of theirs is never off
// the grid.
type sokobanGen struct {
	rng                         *rand.Rand
	rows, cols, numBoxes, moves int
	steps                       [4]int // up, down, left, right as index changes
	cells                       []int8 // fixed layer codes
	floor                       []int  // floor cells of the current room
	targets                     []int  // box i starts on targets[i]
	boxAt                       []int8 // index of the box on each cell, -1 for none
	boxes                       []int  // the cell of each box during a walk
	best                        []int  // the boxes of the best state so far
	bestPlayer, bestScore       int
	// Scratch for toward's breadth-first search: a cell is seen when its
	// mark equals epoch, so no clearing is needed between searches.
	seen         []uint32
	epoch        uint32
	first, queue []int
}

// try carves one room, places the player and targets, and walks from them;
// it reports whether some walk uncovered every target.
func (g *sokobanGen) try() bool {
	g.carve()
	g.floor = g.floor[:0]
	for i, c := range g.cells {
		if c == sokobanFloor {
			g.floor = append(g.floor, i)
		}
	}
	// Reverse play almost never uncovers every target when the floor has
	// fewer than three cells per box, so such rooms are not worth walking.
	if len(g.floor) < 3*g.numBoxes {
		return false
	}
	// A partial shuffle: floor[0] is the player, the next cells the targets.
	for i := range g.numBoxes + 1 {
		j := i + g.rng.IntN(len(g.floor)-i)
		g.floor[i], g.floor[j] = g.floor[j], g.floor[i]
	}
	copy(g.targets, g.floor[1:])
	for _, t := range g.targets {
		g.cells[t] = sokobanTarget
	}
	g.bestScore = 0
	for range sokobanWalks {
		g.walk(g.floor[0])
	}
	return g.bestScore > 0
}

// carve is GEM's topology: a walk of int(1.7*(rows+cols)) steps from a
// random inside cell, turning to a random direction with probability 0.35
// before each step and kept inside the border, stamps a random mask at
// every cell it reaches.
func (g *sokobanGen) carve() {
	clear(g.cells) // all wall
	pos := sokobanPos{1 + g.rng.IntN(g.rows-2), 1 + g.rng.IntN(g.cols-2)}
	step := sokobanSteps[g.rng.IntN(4)]
	for range 17 * (g.rows + g.cols) / 10 {
		if g.rng.Float64() < 0.35 {
			step = sokobanSteps[g.rng.IntN(4)]
		}
		pos = pos.add(step)
		pos[0] = max(1, min(pos[0], g.rows-2))
		pos[1] = max(1, min(pos[1], g.cols-2))
		for _, off := range sokobanMasks[g.rng.IntN(len(sokobanMasks))] {
			if r, c := pos[0]+off[0], pos[1]+off[1]; r > 0 && r < g.rows-1 && c > 0 && c < g.cols-1 {
				g.cells[r*g.cols+c] = sokobanFloor
			}
		}
	}
}

// walk plays up to g.moves random reverse moves from player with the boxes
// on their targets, keeping the best state it passes. As in GEM's reverse
// play, the player steps onto a free cell and always pulls a box that was
// right behind it. Half the moves are uniform among the legal ones; the
// other half pull a box off a target when the player can, or else head for
// the nearest cell from which it can. The bias lets a walk as short as the
// turn limit uncover every target far more often.
func (g *sokobanGen) walk(player int) {
	for i, t := range g.targets {
		g.boxes[i] = t
		g.boxAt[t] = int8(i)
	}
	covered, distance, switches, last := g.numBoxes, 0, 0, -1
	var legal [4]int
	for range g.moves {
		n, uncover := 0, 0
		for _, d := range g.steps {
			if g.free(player + d) {
				legal[n] = d
				n++
				if g.pullsOff(player, d) && (uncover == 0 || g.rng.IntN(2) == 0) {
					uncover = d
				}
			}
		}
		if n == 0 {
			break
		}
		d := legal[g.rng.IntN(n)]
		switch {
		case g.rng.IntN(2) == 0:
		case uncover != 0:
			d = uncover
		case covered > 0:
			if step := g.toward(player); step != 0 {
				d = step
			}
		}
		next := player + d
		if b := g.boxAt[player-d]; b >= 0 {
			from, target := player-d, g.targets[b]
			g.boxAt[from], g.boxAt[player], g.boxes[b] = -1, b, player
			if g.cells[from] == sokobanTarget {
				covered--
			}
			if g.cells[player] == sokobanTarget {
				covered++
			}
			distance += g.manhattan(player, target) - g.manhattan(from, target)
			if int(b) != last {
				switches, last = switches+1, int(b)
			}
		}
		player = next
		if score := switches * distance; covered == 0 && score > g.bestScore {
			g.bestScore, g.bestPlayer = score, player
			copy(g.best, g.boxes)
		}
	}
	for _, c := range g.boxes {
		g.boxAt[c] = -1
	}
}

// free reports whether the player can step onto cell i.
func (g *sokobanGen) free(i int) bool { return g.cells[i] != sokobanWall && g.boxAt[i] < 0 }

// pullsOff reports whether the player on cell i, stepping by d onto a free
// cell, pulls a box off a target.
func (g *sokobanGen) pullsOff(i, d int) bool {
	return g.boxAt[i-d] >= 0 && g.cells[i-d] == sokobanTarget && g.free(i+d)
}

// toward returns the first step of a shortest path over free cells from
// player to another cell where a move pulls a box off a target, or 0 when
// there is none.
func (g *sokobanGen) toward(player int) int {
	g.epoch++
	g.seen[player] = g.epoch
	queue := append(g.queue[:0], player)
	for head := 0; head < len(queue); head++ {
		i := queue[head]
		for _, d := range g.steps {
			if i != player && g.pullsOff(i, d) {
				g.queue = queue
				return g.first[i]
			}
		}
		for _, d := range g.steps {
			j := i + d
			if !g.free(j) || g.seen[j] == g.epoch {
				continue
			}
			g.seen[j] = g.epoch
			g.first[j] = g.first[i]
			if i == player {
				g.first[j] = d
			}
			queue = append(queue, j)
		}
	}
	g.queue = queue
	return 0
}

func (g *sokobanGen) manhattan(a, b int) int {
	dr, dc := a/g.cols-b/g.cols, a%g.cols-b%g.cols
	return max(dr, -dr) + max(dc, -dc)
}

// room returns the best state as the fixed layer, boxes and player.
func (g *sokobanGen) room() (fixed [][]int, boxes []sokobanPos, player sokobanPos, generated bool) {
	fixed = make([][]int, g.rows)
	for r := range fixed {
		fixed[r] = make([]int, g.cols)
		for c := range fixed[r] {
			fixed[r][c] = int(g.cells[r*g.cols+c])
		}
	}
	boxes = make([]sokobanPos, len(g.best))
	for i, b := range g.best {
		boxes[i] = sokobanPos{b / g.cols, b % g.cols}
	}
	sokobanSort(boxes)
	return fixed, boxes, sokobanPos{g.bestPlayer / g.cols, g.bestPlayer % g.cols}, true
}

// sokobanFallback is the fixed room used when generation keeps failing, so
// Reset always ends: an open room with the targets along the top (or left)
// inner wall, a box next to each, and the player in the free row (or
// column) behind the first box. Pushing each box once solves it, within
// 3*num_boxes-2 moves. The parameters must pass sokobanConfig.validate.
func sokobanFallback(rows, cols, numBoxes int) (fixed [][]int, boxes []sokobanPos, player sokobanPos) {
	fixed = make([][]int, rows)
	for r := range fixed {
		fixed[r] = make([]int, cols)
		for c := range fixed[r] {
			if r > 0 && r < rows-1 && c > 0 && c < cols-1 {
				fixed[r][c] = sokobanFloor
			}
		}
	}
	// Transposed when the boxes do not fit in a row.
	at := func(r, c int) sokobanPos { return sokobanPos{r, c} }
	if numBoxes > cols-2 {
		at = func(r, c int) sokobanPos { return sokobanPos{c, r} }
	}
	boxes = make([]sokobanPos, numBoxes)
	for i := range boxes {
		t := at(1, 1+i)
		fixed[t[0]][t[1]] = sokobanTarget
		boxes[i] = at(2, 1+i)
	}
	return fixed, boxes, at(3, 1)
}
