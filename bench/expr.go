package bench

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"
)

// This file applies a DynamoDB update expression to an in-memory copy of an
// item, so that the meter knows every item's size before and after each
// write without reading it back. It covers what the approaches and the
// project's consumers send: SET with paths, #names, :values, + and −,
// if_not_exists and list_append; REMOVE; ADD of numbers and of sets, and
// DELETE from sets (the applied items' `open` marks). Conditions are not
// evaluated: DynamoDB decides them, and the meter applies a write only once
// DynamoDB accepted it.

type pathElem struct {
	name  string
	index int // when name == ""
}

type attrPath []pathElem

type operand interface {
	eval(item map[string]ddbtypes.AttributeValue) (ddbtypes.AttributeValue, error)
}

type pathOperand struct{ path attrPath }
type valueOperand struct{ v ddbtypes.AttributeValue }
type ifNotExists struct {
	path attrPath
	def  operand
}
type listAppend struct{ a, b operand }
type arith struct {
	op   byte
	a, b operand
}

func (o pathOperand) eval(item map[string]ddbtypes.AttributeValue) (ddbtypes.AttributeValue, error) {
	v, ok := get(item, o.path)
	if !ok {
		return nil, fmt.Errorf("path %s does not exist", o.path)
	}
	return v, nil
}

func (o valueOperand) eval(map[string]ddbtypes.AttributeValue) (ddbtypes.AttributeValue, error) {
	return o.v, nil
}

func (o ifNotExists) eval(item map[string]ddbtypes.AttributeValue) (ddbtypes.AttributeValue, error) {
	if v, ok := get(item, o.path); ok {
		return v, nil
	}
	return o.def.eval(item)
}

func (o listAppend) eval(item map[string]ddbtypes.AttributeValue) (ddbtypes.AttributeValue, error) {
	a, err := o.a.eval(item)
	if err != nil {
		return nil, err
	}
	b, err := o.b.eval(item)
	if err != nil {
		return nil, err
	}
	la, ok1 := a.(*ddbtypes.AttributeValueMemberL)
	lb, ok2 := b.(*ddbtypes.AttributeValueMemberL)
	if !ok1 || !ok2 {
		return nil, errors.New("list_append of a non-list")
	}
	return &ddbtypes.AttributeValueMemberL{Value: slices.Concat(la.Value, lb.Value)}, nil
}

func (o arith) eval(item map[string]ddbtypes.AttributeValue) (ddbtypes.AttributeValue, error) {
	a, err := o.a.eval(item)
	if err != nil {
		return nil, err
	}
	b, err := o.b.eval(item)
	if err != nil {
		return nil, err
	}
	x, err := number(a)
	if err != nil {
		return nil, err
	}
	y, err := number(b)
	if err != nil {
		return nil, err
	}
	if o.op == '-' {
		y = y.Neg()
	}
	return &ddbtypes.AttributeValueMemberN{Value: x.Add(y).String()}, nil
}

// isSet reports whether v is a string or number set.
func isSet(v ddbtypes.AttributeValue) bool {
	switch v.(type) {
	case *ddbtypes.AttributeValueMemberSS, *ddbtypes.AttributeValueMemberNS:
		return true
	}
	return false
}

// setMembers returns the members of a string or number set and a
// constructor of a set of the same type.
func setMembers(v ddbtypes.AttributeValue) ([]string, func([]string) ddbtypes.AttributeValue, bool) {
	switch s := v.(type) {
	case *ddbtypes.AttributeValueMemberSS:
		return s.Value, func(m []string) ddbtypes.AttributeValue { return &ddbtypes.AttributeValueMemberSS{Value: m} }, true
	case *ddbtypes.AttributeValueMemberNS:
		return s.Value, func(m []string) ddbtypes.AttributeValue { return &ddbtypes.AttributeValueMemberNS{Value: m} }, true
	}
	return nil, nil, false
}

// setUnion is ADD of set b to set a (both of one type).
func setUnion(a, b ddbtypes.AttributeValue) (ddbtypes.AttributeValue, error) {
	am, mk, ok := setMembers(a)
	bm, _, okb := setMembers(b)
	if !ok || !okb || fmt.Sprintf("%T", a) != fmt.Sprintf("%T", b) {
		return nil, errors.New("ADD of a set to an attribute of another type")
	}
	out := slices.Clone(am)
	for _, m := range bm {
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return mk(out), nil
}

// setMinus is DELETE of set b from set a: nil when nothing is left.
func setMinus(a, b ddbtypes.AttributeValue) (ddbtypes.AttributeValue, error) {
	am, mk, ok := setMembers(a)
	bm, _, okb := setMembers(b)
	if !ok || !okb || fmt.Sprintf("%T", a) != fmt.Sprintf("%T", b) {
		return nil, errors.New("DELETE of a set from an attribute of another type")
	}
	var out []string
	for _, m := range am {
		if !slices.Contains(bm, m) {
			out = append(out, m)
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	return mk(out), nil
}

func number(v ddbtypes.AttributeValue) (decimal.Decimal, error) {
	n, ok := v.(*ddbtypes.AttributeValueMemberN)
	if !ok {
		return decimal.Zero, errors.New("arithmetic on a non-number")
	}
	return decimal.NewFromString(n.Value)
}

func (p attrPath) String() string {
	var b strings.Builder
	for i, e := range p {
		switch {
		case e.name == "":
			b.WriteString("[" + strconv.Itoa(e.index) + "]")
		case i > 0:
			b.WriteString("." + e.name)
		default:
			b.WriteString(e.name)
		}
	}
	return b.String()
}

type action struct {
	kind  string // SET, REMOVE, ADD, DELETE
	path  attrPath
	value operand // nil for REMOVE
}

// applyUpdate returns a copy of item (nil: absent) after the update
// expression, with names and values substituted. Every right-hand side is
// evaluated against the item as it was, as DynamoDB does.
func applyUpdate(item map[string]ddbtypes.AttributeValue, expr string, names map[string]string, values map[string]ddbtypes.AttributeValue) (map[string]ddbtypes.AttributeValue, error) {
	acts, err := parseUpdate(expr, names, values)
	if err != nil {
		return nil, err
	}
	if item == nil {
		item = map[string]ddbtypes.AttributeValue{}
	}
	results := make([]ddbtypes.AttributeValue, len(acts))
	for i, a := range acts {
		if a.value == nil {
			continue
		}
		if results[i], err = a.value.eval(item); err != nil {
			return nil, fmt.Errorf("update %q: %w", expr, err)
		}
	}
	out := deepCopy(item)
	for i, a := range acts {
		switch a.kind {
		case "SET":
			err = set(out, a.path, deepCopyValue(results[i]))
		case "REMOVE":
			remove(out, a.path)
		case "ADD":
			cur, ok := get(out, a.path)
			if !ok {
				err = set(out, a.path, deepCopyValue(results[i]))
				break
			}
			var sum ddbtypes.AttributeValue
			if isSet(results[i]) {
				sum, err = setUnion(cur, results[i])
			} else {
				sum, err = (arith{op: '+', a: valueOperand{cur}, b: valueOperand{results[i]}}).eval(nil)
			}
			if err == nil {
				err = set(out, a.path, sum)
			}
		case "DELETE":
			cur, ok := get(out, a.path)
			if !ok {
				break // nothing to delete from
			}
			var left ddbtypes.AttributeValue
			if left, err = setMinus(cur, results[i]); err == nil {
				if left == nil {
					remove(out, a.path) // an empty set is no attribute
				} else {
					err = set(out, a.path, left)
				}
			}
		default:
			err = fmt.Errorf("%s is not supported", a.kind)
		}
		if err != nil {
			return nil, fmt.Errorf("update %q: %w", expr, err)
		}
	}
	return out, nil
}

func get(item map[string]ddbtypes.AttributeValue, p attrPath) (ddbtypes.AttributeValue, bool) {
	var cur ddbtypes.AttributeValue = &ddbtypes.AttributeValueMemberM{Value: item}
	for _, e := range p {
		switch c := cur.(type) {
		case *ddbtypes.AttributeValueMemberM:
			v, ok := c.Value[e.name]
			if e.name == "" || !ok {
				return nil, false
			}
			cur = v
		case *ddbtypes.AttributeValueMemberL:
			if e.name != "" || e.index < 0 || e.index >= len(c.Value) {
				return nil, false
			}
			cur = c.Value[e.index]
		default:
			return nil, false
		}
	}
	return cur, true
}

func set(item map[string]ddbtypes.AttributeValue, p attrPath, v ddbtypes.AttributeValue) error {
	parent, ok := get(item, p[:len(p)-1])
	if !ok {
		return fmt.Errorf("document path %s: parent does not exist", p)
	}
	last := p[len(p)-1]
	switch c := parent.(type) {
	case *ddbtypes.AttributeValueMemberM:
		if last.name == "" {
			return fmt.Errorf("document path %s: index into a map", p)
		}
		c.Value[last.name] = v
	case *ddbtypes.AttributeValueMemberL:
		switch {
		case last.name != "":
			return fmt.Errorf("document path %s: name into a list", p)
		case last.index < len(c.Value):
			c.Value[last.index] = v
		default:
			c.Value = append(c.Value, v)
		}
	default:
		return fmt.Errorf("document path %s: parent is not a map or list", p)
	}
	return nil
}

func remove(item map[string]ddbtypes.AttributeValue, p attrPath) {
	parent, ok := get(item, p[:len(p)-1])
	if !ok {
		return
	}
	last := p[len(p)-1]
	switch c := parent.(type) {
	case *ddbtypes.AttributeValueMemberM:
		delete(c.Value, last.name)
	case *ddbtypes.AttributeValueMemberL:
		if last.name == "" && last.index < len(c.Value) {
			c.Value = slices.Delete(c.Value, last.index, last.index+1)
		}
	}
}

func deepCopy(item map[string]ddbtypes.AttributeValue) map[string]ddbtypes.AttributeValue {
	if item == nil {
		return nil
	}
	out := make(map[string]ddbtypes.AttributeValue, len(item))
	for k, v := range item {
		out[k] = deepCopyValue(v)
	}
	return out
}

func deepCopyValue(v ddbtypes.AttributeValue) ddbtypes.AttributeValue {
	switch v := v.(type) {
	case *ddbtypes.AttributeValueMemberM:
		return &ddbtypes.AttributeValueMemberM{Value: deepCopy(v.Value)}
	case *ddbtypes.AttributeValueMemberL:
		l := make([]ddbtypes.AttributeValue, len(v.Value))
		for i, e := range v.Value {
			l[i] = deepCopyValue(e)
		}
		return &ddbtypes.AttributeValueMemberL{Value: l}
	case *ddbtypes.AttributeValueMemberSS:
		return &ddbtypes.AttributeValueMemberSS{Value: slices.Clone(v.Value)}
	case *ddbtypes.AttributeValueMemberNS:
		return &ddbtypes.AttributeValueMemberNS{Value: slices.Clone(v.Value)}
	}
	return v // scalars are never modified in place
}

// --- parsing ---

type token struct {
	kind byte // 'i' identifier, '#' name, ':' value, 'n' digits, or the punctuation itself; 0 at the end
	text string
}

func tokenize(s string) ([]token, error) {
	var out []token
	isWord := func(c byte) bool {
		return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
	}
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#' || c == ':' || isWord(c):
			j := i + 1
			for j < len(s) && isWord(s[j]) {
				j++
			}
			kind := c
			if isWord(c) {
				kind = 'i'
				if c >= '0' && c <= '9' {
					kind = 'n'
				}
			}
			out = append(out, token{kind: kind, text: s[i:j]})
			i = j
		case strings.IndexByte("=+-,().[]", c) >= 0:
			out = append(out, token{kind: c, text: string(c)})
			i++
		default:
			return nil, fmt.Errorf("unexpected %q at %d", c, i)
		}
	}
	return out, nil
}

type parser struct {
	toks   []token
	pos    int
	names  map[string]string
	values map[string]ddbtypes.AttributeValue
}

func (p *parser) peek() token {
	if p.pos < len(p.toks) {
		return p.toks[p.pos]
	}
	return token{}
}

func (p *parser) next() token { t := p.peek(); p.pos++; return t }

func (p *parser) expect(kind byte) error {
	if t := p.next(); t.kind != kind {
		return fmt.Errorf("got %q; want %q", t.text, string(kind))
	}
	return nil
}

var clauses = map[string]bool{"SET": true, "REMOVE": true, "ADD": true, "DELETE": true}

func parseUpdate(expr string, names map[string]string, values map[string]ddbtypes.AttributeValue) ([]action, error) {
	toks, err := tokenize(expr)
	if err != nil {
		return nil, fmt.Errorf("update %q: %w", expr, err)
	}
	p := &parser{toks: toks, names: names, values: values}
	var acts []action
	for p.peek().kind != 0 {
		kw := strings.ToUpper(p.next().text)
		if !clauses[kw] {
			return nil, fmt.Errorf("update %q: clause %q", expr, kw)
		}
		for {
			a, err := p.action(kw)
			if err != nil {
				return nil, fmt.Errorf("update %q: %w", expr, err)
			}
			acts = append(acts, a)
			if p.peek().kind != ',' {
				break
			}
			p.next()
		}
	}
	return acts, nil
}

func (p *parser) action(kind string) (action, error) {
	path, err := p.path()
	if err != nil {
		return action{}, err
	}
	a := action{kind: kind, path: path}
	switch kind {
	case "SET":
		if err := p.expect('='); err != nil {
			return a, err
		}
		a.value, err = p.value()
	case "ADD", "DELETE":
		a.value, err = p.operand()
	}
	return a, err
}

func (p *parser) value() (operand, error) {
	a, err := p.operand()
	if err != nil {
		return nil, err
	}
	if k := p.peek().kind; k == '+' || k == '-' {
		p.next()
		b, err := p.operand()
		if err != nil {
			return nil, err
		}
		return arith{op: k, a: a, b: b}, nil
	}
	return a, nil
}

func (p *parser) operand() (operand, error) {
	t := p.peek()
	switch {
	case t.kind == ':':
		p.next()
		v, ok := p.values[t.text]
		if !ok {
			return nil, fmt.Errorf("value %s is not defined", t.text)
		}
		return valueOperand{v}, nil
	case t.kind == 'i' && p.pos+1 < len(p.toks) && p.toks[p.pos+1].kind == '(':
		p.pos += 2
		var op operand
		switch strings.ToLower(t.text) {
		case "if_not_exists":
			path, err := p.path()
			if err != nil {
				return nil, err
			}
			if err := p.expect(','); err != nil {
				return nil, err
			}
			def, err := p.value()
			if err != nil {
				return nil, err
			}
			op = ifNotExists{path: path, def: def}
		case "list_append":
			a, err := p.value()
			if err != nil {
				return nil, err
			}
			if err := p.expect(','); err != nil {
				return nil, err
			}
			b, err := p.value()
			if err != nil {
				return nil, err
			}
			op = listAppend{a: a, b: b}
		default:
			return nil, fmt.Errorf("function %s is not supported", t.text)
		}
		return op, p.expect(')')
	}
	path, err := p.path()
	if err != nil {
		return nil, err
	}
	return pathOperand{path}, nil
}

func (p *parser) path() (attrPath, error) {
	var out attrPath
	elem := func() error {
		t := p.next()
		switch t.kind {
		case '#':
			name, ok := p.names[t.text]
			if !ok {
				return fmt.Errorf("name %s is not defined", t.text)
			}
			out = append(out, pathElem{name: name})
		case 'i':
			out = append(out, pathElem{name: t.text})
		default:
			return fmt.Errorf("got %q; want an attribute name", t.text)
		}
		return nil
	}
	if err := elem(); err != nil {
		return nil, err
	}
	for {
		switch p.peek().kind {
		case '.':
			p.next()
			if err := elem(); err != nil {
				return nil, err
			}
		case '[':
			p.next()
			t := p.next()
			i, err := strconv.Atoi(t.text)
			if t.kind != 'n' || err != nil {
				return nil, fmt.Errorf("list index %q", t.text)
			}
			out = append(out, pathElem{index: i})
			if err := p.expect(']'); err != nil {
				return nil, err
			}
		default:
			return out, nil
		}
	}
}
