package envplay

import (
	"bufio"
	"fmt"
	"io"
	"strconv"

	"github.com/rollfleet/rollfleet/envs"
)

// Interactive lets a person play env in a terminal: it shows the
// observation and the game's call to action, reads one line as the action,
// shows the reward and the feedback, and ends with the episode's return.
// It returns that return; input that ends early ends the episode there.
func Interactive(r io.Reader, w io.Writer, env envs.Env, obs string, info envs.Info) (float64, error) {
	out := bufio.NewWriter(w)
	show := func(text string, info envs.Info) {
		fmt.Fprintln(out, text)
		if s := info["suffix"]; s != "" {
			fmt.Fprintln(out, s)
		}
		fmt.Fprint(out, "> ")
	}
	show(obs, info)
	if err := out.Flush(); err != nil {
		return 0, fmt.Errorf("envplay: write: %w", err)
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), MaxLine)
	var total float64
	turns := 0
	for sc.Scan() {
		res := env.Step(sc.Text())
		turns++
		total += res.Reward
		fmt.Fprintf(out, "\n[turn %d] reward %s\n", turns, strconv.FormatFloat(res.Reward, 'g', -1, 64))
		if res.Done() {
			fmt.Fprintln(out, res.Observation)
			fmt.Fprintf(out, "episode over after %d turns (terminated=%v truncated=%v); return %s\n",
				turns, res.Terminated, res.Truncated, strconv.FormatFloat(total, 'g', -1, 64))
			return total, flush(out)
		}
		show(res.Observation, res.Info)
		if err := out.Flush(); err != nil {
			return total, fmt.Errorf("envplay: write: %w", err)
		}
	}
	if err := sc.Err(); err != nil {
		return total, fmt.Errorf("envplay: read: %w", err)
	}
	fmt.Fprintf(out, "\ninput ended after %d turns; return %s\n", turns, strconv.FormatFloat(total, 'g', -1, 64))
	return total, flush(out)
}

func flush(w *bufio.Writer) error {
	if err := w.Flush(); err != nil {
		return fmt.Errorf("envplay: write: %w", err)
	}
	return nil
}
