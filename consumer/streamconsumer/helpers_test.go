package streamconsumer_test

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/consumer"
	"github.com/walbox/walbox/internal/testenv"
)

func TestMain(m *testing.M) {
	if os.Getenv(streamChildEnv) != "" {
		os.Exit(runStreamChild()) // a stream consumer the test kills (consumer_test.go)
	}
	os.Exit(testenv.Main(m))
}

// skipShort skips an integration test under -short.
func skipShort(tb testing.TB) {
	tb.Helper()
	if testenv.Short() {
		tb.Skip("integration test: needs PostgreSQL and RabbitMQ")
	}
}

func (se *streamEnv) count(tb testing.TB, sql string, args ...any) int {
	tb.Helper()
	var n int
	if err := se.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		tb.Fatalf("%s: %v", sql, err)
	}
	return n
}

// recordEffect is the handlers' business write.
func recordEffect(ctx context.Context, tx pgx.Tx, d consumer.Delivery) error {
	_, err := tx.Exec(ctx, "INSERT INTO effects VALUES ($1, $2)", d.MessageID, d.Attempt)
	return err
}
