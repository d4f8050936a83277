package replication

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/walbox/walbox/inspect"
)

func TestObjectNotInPrerequisiteStateIsClassifiedByCondition(t *testing.T) {
	tests := []struct {
		name, message, detail string
		want                  error // nil: retryable, and none of walbox's errors
		retryable             bool
	}{
		{"invalidated slot (PG 15)", `can no longer get changes from replication slot "s"`,
			"This slot has been invalidated because it exceeded the maximum reserved size.", ErrSlotLost, false},
		{"invalidated slot (PG 16)", `cannot read from logical replication slot "s"`,
			"This slot has been invalidated because it exceeded the maximum reserved size.", ErrSlotLost, false},
		{"slot of another database", `replication slot "s" was not created in this database`, "", inspect.ErrSlotMismatch, false},
		{"physical slot", "cannot use physical replication slot for logical decoding", "", inspect.ErrSlotMismatch, false},
		{"wal_level", "logical decoding requires wal_level >= logical", "", inspect.ErrWalLevel, false},
		{"server in recovery", "logical decoding cannot be used while in recovery", "", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := classify(&pgconn.PgError{Code: "55000", Message: tt.message, Detail: tt.detail}, "s")
			if got := retryable(err); got != tt.retryable {
				t.Fatalf("retryable(%v) = %v, want %v", err, got, tt.retryable)
			}
			for _, sentinel := range []error{ErrSlotLost, inspect.ErrSlotMismatch, inspect.ErrWalLevel} {
				if got, want := errors.Is(err, sentinel), sentinel == tt.want; got != want {
					t.Fatalf("errors.Is(%v, %v) = %v, want %v", err, sentinel, got, want)
				}
			}
		})
	}
}
