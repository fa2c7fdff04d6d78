package main

import (
	"io"

	"github.com/ledger-dev/ledger/cmd/internal/progress"
)

// meter returns the progress display of the work called name, on stderr
// (package progress; LEDGER_PROGRESS_EVERY from the environment).
func (e *environment) meter(name string) progress.Meter {
	return progress.New(name, e.stderr, e.getenv)
}

// lines is where a command prints its result lines while m runs (see
// progress.Lines).
func (e *environment) lines(m progress.Meter) io.Writer { return progress.Lines(m, e.stdout) }
