package cmdutil

import (
	"fmt"
	"github.com/rollfleet/rollfleet/remoteenv"
)

// RemoteEnvs parses --remote flags (ID=KIND,URL each).
func RemoteEnvs(flags []string) ([]remoteenv.Config, error) {
	var out []remoteenv.Config
	for _, f := range flags {
		c, err := remoteenv.Parse(f)
		if err != nil {
			return nil, fmt.Errorf("--remote: %w", err)
		}
		out = append(out, c)
	}
	return out, nil
}
