//go:build !unix

package ddblocal

import (
	"errors"
	"os/exec"
)

type process struct {
	done chan struct{}
	err  error
}

func startProcess(*exec.Cmd) (*process, error) {
	return nil, errors.New("running DynamoDB Local is only supported on unix systems")
}

func (p *process) pid() int         { return 0 }
func (p *process) terminate() error { return nil }
func (p *process) kill() error      { return nil }
