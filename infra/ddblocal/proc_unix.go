//go:build unix

package ddblocal

import (
	"errors"
	"os/exec"
	"runtime"
	"syscall"
)

// process is a started child and the result of waiting for it.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the child has exited and been reaped
	err  error         // cmd.Wait's result; read only after done is closed
}

// startProcess starts cmd in a process group of its own (so Stop can
// signal everything it started, and a Ctrl-C to the test binary's group is
// not delivered to it twice) and, where the OS allows, with a parent-death
// signal so it is killed if this process dies without calling Stop.
func startProcess(cmd *exec.Cmd) (*process, error) {
	cmd.SysProcAttr = sysProcAttr()
	p := &process{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Linux sends the parent-death signal when the thread that forked
		// the child exits, not the process. Go may retire idle threads, so
		// keep this goroutine on its own thread while the child lives.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) terminate() error { return p.signalGroup(syscall.SIGTERM) }
func (p *process) kill() error      { return p.signalGroup(syscall.SIGKILL) }

// signalGroup signals the child's whole process group; a group that is
// already gone is not an error.
func (p *process) signalGroup(sig syscall.Signal) error {
	err := syscall.Kill(-p.cmd.Process.Pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}
