package chaos

import (
	"os"
	"syscall"
)

// sysProcAttr has nothing to add on Windows.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// Windows has no signal that pauses a process: pauses are not sent.
var sigStop, sigCont os.Signal
