package bench

import (
	"strings"
	"testing"
	"time"
)

// pgbenchLog is the start of a log that pgbench 15.20 wrote with -R 200 -c 4 -t 100 -l, and a
// line with the retries field that --max-tries adds.
const pgbenchLog = `0 1 11550 0 1795643722 993276 109
1 1 11165 0 1795643722 993308 1774
2 1 10728 0 1795643722 993314 4618
0 2 3905 0 1795643722 993653 3570
1 99 529 0 1795643724 979699 88
1 100 343 0 1795643724 981352 65 0
`

func TestPgbenchLogGivesEndsAndScheduleLags(t *testing.T) {
	ends, lags, err := parsePgbenchLog(strings.NewReader(pgbenchLog))
	if err != nil {
		t.Fatal(err)
	}
	wantEnds := []int64{1795643722_993276_000, 1795643722_993308_000, 1795643722_993314_000, 1795643722_993653_000,
		1795643724_979699_000, 1795643724_981352_000}
	wantLags := []time.Duration{109, 1774, 4618, 3570, 88, 65}
	if len(ends) != len(wantEnds) || len(lags) != len(wantLags) {
		t.Fatalf("got %d ends and %d lags, want %d of each", len(ends), len(lags), len(wantEnds))
	}
	for i := range wantEnds {
		if ends[i] != wantEnds[i] || lags[i] != wantLags[i]*time.Microsecond {
			t.Errorf("line %d: got end %d, lag %v; want %d, %v", i+1, ends[i], lags[i], wantEnds[i], wantLags[i]*time.Microsecond)
		}
	}
}

func TestPgbenchLogRejectsTransactionsWithoutARow(t *testing.T) {
	for name, line := range map[string]string{
		"failed":       "3 7 failed 0 1795643722 993276 109",
		"skipped":      "3 7 skipped 0 1795643722 993276 109",
		"without rate": "3 7 11550 0 1795643722 993276",
		"garbled":      "3 7 11550 0 1795643722 99x276 109",
	} {
		if _, _, err := parsePgbenchLog(strings.NewReader(pgbenchLog + line + "\n")); err == nil || !strings.Contains(err.Error(), "line 7") {
			t.Errorf("%s: got %v, want an error at line 7", name, err)
		}
	}
}
