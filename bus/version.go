package bus

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
)

// MinServerVersion is the oldest nats-server the fleet runs on: the
// collector's consumers are pinned priority groups (PriorityPolicyPinned),
// which 2.11 introduced; an older server refuses them, or ignores fields it
// does not know.
const MinServerVersion = "2.11.0"

// ErrServerTooOld means the NATS server is older than MinServerVersion.
var ErrServerTooOld = errors.New("bus: NATS server too old")

// minServerVersion is MinServerVersion as numbers.
var minServerVersion = [3]int{2, 11, 0}

// CheckServerVersion returns ErrServerTooOld, naming both versions, when nc
// is connected to a server older than MinServerVersion. A connection not
// connected yet passes: the check is made again once it is.
func CheckServerVersion(nc *nats.Conn) error {
	if !nc.IsConnected() {
		return nil
	}
	v := nc.ConnectedServerVersion()
	if serverVersionAtLeast(v, minServerVersion) {
		return nil
	}
	return fmt.Errorf("%w: %s is version %s; rollfleet needs nats-server %s or newer (see docs/deployment.md)",
		ErrServerTooOld, nc.ConnectedUrlRedacted(), v, MinServerVersion)
}

// serverVersionAtLeast reports whether version ("2.10.3", "v2.11.0-RC.1")
// is at least min. A pre-release counts as its release; a version that does
// not parse is too old, so a server that does not say is not trusted.
func serverVersionAtLeast(version string, min [3]int) bool {
	core, _, _ := strings.Cut(strings.TrimPrefix(version, "v"), "-")
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return false
		}
		if n != min[i] {
			return n > min[i]
		}
	}
	return true
}
