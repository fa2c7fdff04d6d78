//go:build unix && !linux

package ddblocal

import "syscall"

// Only Linux has a parent-death signal; elsewhere an instance whose owner
// dies without calling Stop keeps running until killed.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
