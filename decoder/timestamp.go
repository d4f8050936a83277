package decoder

import "time"

// parseTimestamp parses the text output of a PostgreSQL timestamptz in the ISO DateStyle. That is
// "2026-11-22 07:15:24.123456+00", with or without fractional digits (up to 9 accepted). The offset
// has the form +05, +05:30 or +05:53:28. Without an offset (a timestamp column) the time is taken
// as UTC. A 'T' between date and time is accepted too. The result is in UTC. It does not allocate.
// On failure it returns the zero time and false.
func parseTimestamp(b []byte) (time.Time, bool) {
	p := tsParser{b: b}
	year := p.year()
	p.sep('-')
	month := p.digits(2)
	p.sep('-')
	day := p.digits(2)
	if p.peek() == 'T' {
		p.i++
	} else {
		p.sep(' ')
	}
	hour := p.digits(2)
	p.sep(':')
	minute := p.digits(2)
	p.sep(':')
	sec := p.digits(2)
	nsec := p.fraction()
	offset := p.offset()
	if p.failed || p.i != len(b) ||
		month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, false
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC)
	if t.Day() != day { // February 30th and the like
		return time.Time{}, false
	}
	return t.Add(-time.Duration(offset) * time.Second), true
}

// tsParser reads a timestamp left to right; failed turns true at the first mismatch, after
// which every read returns zero.
type tsParser struct {
	b      []byte
	i      int
	failed bool
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// peek returns the next byte, or 0 at the end.
func (p *tsParser) peek() byte {
	if p.failed || p.i >= len(p.b) {
		return 0
	}
	return p.b[p.i]
}

// sep reads the byte c.
func (p *tsParser) sep(c byte) {
	if p.peek() != c {
		p.failed = true
		return
	}
	p.i++
}

// digits reads exactly n digits.
func (p *tsParser) digits(n int) int {
	v := 0
	for range n {
		c := p.peek()
		if !isDigit(c) {
			p.failed = true
			return 0
		}
		v = v*10 + int(c-'0')
		p.i++
	}
	return v
}

// year reads 4 to 6 digits (PostgreSQL's years end at 294276).
func (p *tsParser) year() int {
	v, n := 0, 0
	for ; n < 6 && isDigit(p.peek()); n++ {
		v = v*10 + int(p.peek()-'0')
		p.i++
	}
	if n < 4 {
		p.failed = true
	}
	return v
}

// fraction reads an optional ".123456" and returns it in nanoseconds.
func (p *tsParser) fraction() int {
	if p.peek() != '.' {
		return 0
	}
	p.i++
	v, n := 0, 0
	for ; n < 9 && isDigit(p.peek()); n++ {
		v = v*10 + int(p.peek()-'0')
		p.i++
	}
	if n == 0 {
		p.failed = true
	}
	for ; n < 9; n++ {
		v *= 10
	}
	return v
}

// offset reads an optional "+05", "+05:30" or "+05:53:28" and returns it in seconds east of UTC.
func (p *tsParser) offset() int {
	sign := 1
	switch p.peek() {
	case '+':
	case '-':
		sign = -1
	default:
		return 0
	}
	p.i++
	h, m, s := p.digits(2), 0, 0
	if p.peek() == ':' {
		p.i++
		m = p.digits(2)
	}
	if p.peek() == ':' {
		p.i++
		s = p.digits(2)
	}
	if h > 15 || m > 59 || s > 59 {
		p.failed = true
	}
	return sign * (h*3600 + m*60 + s)
}
