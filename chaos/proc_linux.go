package chaos

import (
	"os"
	"syscall"
)

// sysProcAttr puts a child in its own process group, so a terminal's Ctrl-C
// reaches only the harness (which then stops the fleet), and has the kernel
// kill it should the harness itself die without cleaning up.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// The signals that pause and continue a process.
var sigStop, sigCont os.Signal = syscall.SIGSTOP, syscall.SIGCONT
