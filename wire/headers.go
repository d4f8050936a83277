package wire

import (
	"encoding/json"
	"strconv"
	"strings"
)

// ReservedHeaderPrefix starts the names of the headers walbox and its consumer library set. Some
// are x-walbox-reason, x-walbox-attempts and x-walbox-error. A message may not carry one of its
// own. The producer rejects it, and the relay parks a row that has one. The match ignores ASCII
// case.
const ReservedHeaderPrefix = "x-walbox-"

// ReservedHeader reports whether name starts with ReservedHeaderPrefix, in any case.
func ReservedHeader(name string) bool {
	n := len(ReservedHeaderPrefix)
	return len(name) >= n && strings.EqualFold(name[:n], ReservedHeaderPrefix)
}

// HeaderNumber returns the header value of the JSON number text s, so that the number arrives
// unchanged:
//   - An integer (no fraction, no exponent) within int64 becomes an int64.
//   - Any other number becomes a float64 if that float64 is the same number. It is when its
//     shortest decimal form has the value written: 0.1, 1.5, 1e300 and 1.0 do. The numbers
//     0.1000000000000000055511151231257827, 9007199254740993.0 and 1e400 do not.
//   - Any other number stays its text, a string (12345678901234567890, 1e400).
//
// s must be a valid JSON number; any other text is returned as it is.
func HeaderNumber(s string) any {
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return s
	}
	if !sameDecimal(s, strconv.FormatFloat(f, 'e', -1, 64)) {
		return s
	}
	return f
}

// sameDecimal reports whether the decimal texts a and b have the same value.
func sameDecimal(a, b string) bool {
	x, ok := canonicalDecimal(a)
	if !ok {
		return false
	}
	y, ok := canonicalDecimal(b)
	return ok && x == y
}

// decimal is a decimal number as ±0.digits × 10^exp, digits without leading or trailing zeros.
type decimal struct {
	neg    bool
	digits string
	exp    int
}

// canonicalDecimal parses a JSON number; ok is false for an exponent out of int's range. Zero is
// {false, "", 0}, whatever its sign.
func canonicalDecimal(s string) (d decimal, ok bool) {
	if strings.HasPrefix(s, "-") {
		d.neg, s = true, s[1:]
	}
	mant, exp := s, 0
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		e, err := strconv.Atoi(strings.TrimPrefix(s[i+1:], "+"))
		if err != nil {
			return decimal{}, false
		}
		mant, exp = s[:i], e
	}
	whole, frac, _ := strings.Cut(mant, ".")
	digits := whole + frac
	exp += len(whole) // value = 0.digits × 10^exp
	trimmed := strings.TrimLeft(digits, "0")
	exp -= len(digits) - len(trimmed)
	d.digits = strings.TrimRight(trimmed, "0")
	if d.digits == "" {
		return decimal{}, true
	}
	d.exp = exp
	return d, true
}

// HeaderNumbers replaces every json.Number in v, a value decoded with UseNumber, by what
// HeaderNumber makes of it. It returns v, changed in place.
func HeaderNumbers(v any) any {
	switch v := v.(type) {
	case json.Number:
		return HeaderNumber(string(v))
	case map[string]any:
		for k, e := range v {
			v[k] = HeaderNumbers(e)
		}
	case []any:
		for i, e := range v {
			v[i] = HeaderNumbers(e)
		}
	}
	return v
}
