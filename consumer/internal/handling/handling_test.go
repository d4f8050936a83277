package handling

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func TestRetryDelayDoublesUpToTheMax(t *testing.T) {
	for _, tc := range []struct {
		backoff, maxDelay time.Duration
		attempt           int
		want              time.Duration
	}{
		{time.Second, time.Minute, 1, time.Second},
		{time.Second, time.Minute, 2, 2 * time.Second},
		{time.Second, time.Minute, 6, 32 * time.Second},
		{time.Second, time.Minute, 7, time.Minute},
		{time.Second, time.Minute, 1000, time.Minute},
		{1500 * time.Microsecond, time.Second, 2, 3 * time.Millisecond}, // no rounding here
		// Shifting 10s left 30 times, as the stream consumer did, wrapped to a negative delay.
		{10 * time.Second, time.Hour, 31, time.Hour},
		{time.Nanosecond, time.Hour, 100, time.Hour}, // doubling goes on past 30 attempts
		{time.Second, math.MaxInt64, 100, math.MaxInt64},
	} {
		if got := RetryDelay(tc.backoff, tc.maxDelay, tc.attempt); got != tc.want {
			t.Errorf("RetryDelay(%s, %s, %d) = %s, want %s", tc.backoff, tc.maxDelay, tc.attempt, got, tc.want)
		}
	}
}

func TestCallTurnsAPanicIntoAnError(t *testing.T) {
	err := Call(t.Context(), func(context.Context, pgx.Tx, string) error { panic("handler bug") }, nil, "m1")
	if err == nil || err.Error() != "handler panic: handler bug" {
		t.Errorf("got %v, want the panic as an error", err)
	}
}

func TestClassifyDBMarksClass42Fatal(t *testing.T) {
	for code, fatal := range map[string]bool{"42P01": true, "42501": true, "40001": false, "08006": false} {
		err := ClassifyDB(fmt.Errorf("read offset: %w", &pgconn.PgError{Code: code}))
		if IsFatal(err) != fatal {
			t.Errorf("SQLSTATE %s: fatal %v, want %v", code, IsFatal(err), fatal)
		}
	}
	if IsFatal(ClassifyDB(errors.New("connection refused"))) {
		t.Error("a non-database error is fatal")
	}
}

func TestErrorHeaderIsCutToValidUTF8(t *testing.T) {
	s := ErrorHeader(errors.New("x" + strings.Repeat("é", maxErrorHeader)))
	if len(s) > maxErrorHeader || !utf8.ValidString(s) {
		t.Errorf("header of %d bytes, valid UTF-8 %v", len(s), utf8.ValidString(s))
	}
}
