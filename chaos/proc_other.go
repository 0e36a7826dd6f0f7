//go:build unix && !linux

package chaos

import (
	"os"
	"syscall"
)

// sysProcAttr puts a child in its own process group, so a terminal's Ctrl-C
// reaches only the harness, which then stops the fleet.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// The signals that pause and continue a process.
var sigStop, sigCont os.Signal = syscall.SIGSTOP, syscall.SIGCONT
