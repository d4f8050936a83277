package wire_test

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/walbox/walbox/wire"
)

// Every finite float64, written as Go (or any JSON encoder) writes it, arrives as that float64,
// or as the int64 of the same value when the text is an integer.
func TestHeaderNumberKeepsEveryDouble(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		f := math.Float64frombits(r.Uint64())
		if math.IsNaN(f) || math.IsInf(f, 0) {
			continue
		}
		for _, s := range []string{strconv.FormatFloat(f, 'g', -1, 64), strconv.FormatFloat(f, 'f', -1, 64)} {
			switch got := wire.HeaderNumber(s).(type) {
			case float64:
				if got != f {
					t.Fatalf("HeaderNumber(%s) = %v, want %v", s, got, f)
				}
			case int64:
				if float64(got) != f || strings.ContainsAny(s, ".eE") {
					t.Fatalf("HeaderNumber(%s) = int64 %d, want %v", s, got, f)
				}
			default:
				t.Fatalf("HeaderNumber(%s) = %#v, want the double %v", s, got, f)
			}
		}
	}
}

// A double's shortest form with a tiny extra digit far beyond a double's precision parses to
// (about) the same double, but is not its value: it arrives as its text.
func TestHeaderNumberKeepsTextNoDoubleHolds(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 100000 {
		f := math.Float64frombits(r.Uint64())
		if math.IsNaN(f) || math.IsInf(f, 0) {
			continue
		}
		mant, exp, _ := strings.Cut(strconv.FormatFloat(f, 'e', -1, 64), "e")
		if !strings.Contains(mant, ".") {
			mant += "."
		}
		s := mant + "00000000000000000001e" + exp
		if got := wire.HeaderNumber(s); got != s {
			t.Fatalf("HeaderNumber(%s) = %#v, want the text", s, got)
		}
	}
}

func TestReservedHeader(t *testing.T) {
	for name, want := range map[string]bool{
		"x-walbox-error": true, "X-WALBOX-ATTEMPTS": true, "x-Walbox-": true,
		"x-walbox": false, "walbox-error": false, " x-walbox-error": false, "x_walbox_error": false, "": false,
	} {
		if got := wire.ReservedHeader(name); got != want {
			t.Errorf("ReservedHeader(%q) = %v, want %v", name, got, want)
		}
	}
}
