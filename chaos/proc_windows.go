package chaos

import "syscall"

// sysProcAttr has nothing to add on Windows.
func sysProcAttr() *syscall.SysProcAttr { return nil }
