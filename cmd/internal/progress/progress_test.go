package progress

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vbauerster/mpb/v8"
)

func TestLineMeter_PrintsWhenNothingWasPrintedForTheInterval(t *testing.T) {
	for _, tc := range []struct {
		name  string
		every string
		want  []string
	}{
		{"every step", "0", []string{"work: scanning (", "log line", "work: 1 of 4, 25% (", "work: 4 of 4, 100% ("}},
		{"an interval longer than the work", "1h", []string{"log line"}},
		{"off", "off", []string{"log line"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			m := New("work", &stderr, func(string) string { return tc.every })
			m.Set(0, 0, "scanning")
			_, err := m.Write([]byte("log line\n"))
			require.NoError(t, err)
			m.Set(1, 4, "1 of 4")
			m.Set(4, 4, "4 of 4")
			m.Stop()
			got := strings.Split(strings.TrimSpace(stderr.String()), "\n")
			require.Len(t, got, len(tc.want), stderr.String())
			for i, w := range tc.want {
				assert.True(t, strings.HasPrefix(got[i], w), "line %d: got %q; want %q…", i, got[i], w)
			}
		})
	}
}

func TestLineMeter_BadIntervalFallsBackToTheDefault(t *testing.T) {
	var stderr bytes.Buffer
	m := New("work", &stderr, func(string) string { return "soon" })
	m.Set(1, 2, "half")
	assert.Equal(t, "LEDGER_PROGRESS_EVERY \"soon\": want a duration (e.g. 5s), 0 or off; using 5s\n", stderr.String())
	assert.Equal(t, progressEveryDefault, m.(*lineMeter).every)
}

// TestBarMeter_LogLinesAboveTheBarAndNothingAfterStop drives the terminal
// meter into a buffer (mpb refreshing as on a terminal): log lines are
// printed, the bar shows the name and the status, and Stop returns with the
// bar completed.
func TestBarMeter_LogLinesAboveTheBarAndNothingAfterStop(t *testing.T) {
	var out bytes.Buffer
	m := newBarMeter(&out, "replay", 0, mpb.WithAutoRefresh())
	_, err := m.Write([]byte("before the bar\n"))
	require.NoError(t, err)
	m.Set(1, 4, "1/4 files")
	_, err = m.Write([]byte("file one: 3 records\n"))
	require.NoError(t, err)
	m.Set(4, 4, "4/4 files")
	m.Stop()
	m.Stop() // a second Stop is harmless
	_, err = m.Write([]byte("after the bar\n"))
	require.NoError(t, err)
	m.Set(4, 4, "not shown")

	s := out.String()
	assert.True(t, strings.HasPrefix(s, "before the bar\n"), s)
	assert.Contains(t, s, "file one: 3 records\n")
	assert.Contains(t, s, "replay ")
	assert.Contains(t, s, "files")
	assert.True(t, strings.HasSuffix(s, "after the bar\n"), s)
	assert.NotContains(t, s, "not shown")
}
