package bench

import (
	"os"
	"os/exec"
	"syscall"
)

// peakRSS returns a finished child's peak resident set size in bytes
// (Linux reports ru_maxrss in KiB).
func peakRSS(ps *os.ProcessState) int64 {
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss * 1024
	}
	return 0
}

// dieWithParent makes the child killed if the bench dies first.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
