package demo

import "syscall"

// childProcAttr makes the relay child die with the demo, however the demo
// ends.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
