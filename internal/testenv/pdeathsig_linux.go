package testenv

import "syscall"

// dieWithParent has the kernel kill postgres when the test binary dies,
// including by os.Exit or SIGKILL, where no cleanup runs.
//
// The kernel ties Pdeathsig to the thread that forked, not to the process.
// That is safe here because the Go runtime only ends a thread whose
// goroutine exited while locked to it, and no caller of PostgresDSN locks
// its thread. Go sets the signal after switching to the postgres user, so
// the credential change does not clear it.
func dieWithParent(attr *syscall.SysProcAttr) {
	attr.Pdeathsig = syscall.SIGKILL
}
