package remoteenv

import (
	"slices"
	"strings"

	"github.com/rollfleet/rollfleet/envs"
)

// Match resolves an --env list: ids of the remote envs are taken as
// they are, everything else as registered ids and patterns (envs.Match).
func Match(list string, remote []Config) ([]string, error) {
	var ids, rest []string
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if slices.ContainsFunc(remote, func(c Config) bool { return c.ID == item }) {
			ids = append(ids, item)
		} else if item != "" {
			rest = append(rest, item)
		}
	}
	if len(rest) > 0 {
		matched, err := envs.Match(strings.Join(rest, ","))
		if err != nil {
			return nil, err
		}
		ids = append(ids, matched...)
	}
	return ids, nil
}
