package envs

import (
	"fmt"
	"path"
	"strings"
)

// Match expands a comma-separated list of env ids and patterns into
// registered ids, in the order given and without repeats. A pattern uses
// path.Match syntax, so "game:*" is every game and "game:GuessTheNumber-*"
// one family. An item that matches nothing is an error listing the known ids.
func Match(list string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for item := range strings.SplitSeq(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		var matched []string
		for _, id := range IDs() {
			ok, err := path.Match(item, id)
			if err != nil {
				return nil, fmt.Errorf("envs: pattern %q: %w", item, err)
			}
			if ok {
				matched = append(matched, id)
			}
		}
		if len(matched) == 0 {
			return nil, fmt.Errorf("%w %q; known ids: %s", ErrUnknownEnv, item, strings.Join(IDs(), ", "))
		}
		for _, id := range matched {
			if !seen[id] {
				seen[id] = true
				out = append(out, id)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no env given", ErrUnknownEnv)
	}
	return out, nil
}
