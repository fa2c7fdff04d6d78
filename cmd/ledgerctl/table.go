package main

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// textTable prints rows under a header with aligned columns: text columns to
// the left, the columns marked right (figures) to the right.
type textTable struct {
	head  []string
	right []bool
	rows  [][]string
}

func newTable(head ...string) *textTable {
	return &textTable{head: head, right: make([]bool, len(head))}
}

// alignRight marks columns (by index) as right-aligned.
func (t *textTable) alignRight(cols ...int) *textTable {
	for _, c := range cols {
		t.right[c] = true
	}
	return t
}

func (t *textTable) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *textTable) write(w io.Writer) error {
	width := make([]int, len(t.head))
	for _, row := range append([][]string{t.head}, t.rows...) {
		for i, c := range row {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for _, row := range append([][]string{t.head}, t.rows...) {
		for i, c := range row {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if i > 0 {
				b.WriteString("  ")
			}
			if t.right[i] {
				b.WriteString(pad + c)
			} else if i < len(row)-1 {
				b.WriteString(c + pad)
			} else {
				b.WriteString(c)
			}
		}
		b.WriteString("\n")
	}
	_, err := fmt.Fprint(w, b.String())
	return err
}
