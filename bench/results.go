package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// WriteJSON writes the result as JSON: every figure the markdown shows and
// the configuration and machine of the run, for charts and comparisons
// (ReadResult reads it back).
func (res *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(res); err != nil {
		return fmt.Errorf("bench results: %w", err)
	}
	return nil
}

// ReadResult reads a result WriteJSON wrote.
func ReadResult(r io.Reader) (*Result, error) {
	var res Result
	if err := json.NewDecoder(r).Decode(&res); err != nil {
		return nil, fmt.Errorf("bench results: %w", err)
	}
	if len(res.Rows) == 0 {
		return nil, fmt.Errorf("bench results: no rows")
	}
	return &res, nil
}

// ReadResultFile reads the results file at path.
func ReadResultFile(path string) (*Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	res, err := ReadResult(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return res, nil
}
