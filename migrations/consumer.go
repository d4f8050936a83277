package migrations

import (
	"context"
	"embed"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/wire"
)

//go:embed consumer/*.sql
var consumerFS embed.FS

// DefaultProcessedTable is the table the consumer package records handled messages in.
var DefaultProcessedTable = wire.Table{Schema: "public", Name: "processed_messages"}

// ApplyConsumer creates DefaultProcessedTable, the table consumers deduplicate messages with.
// Beside it, in its schema, it creates the tables of partitioned consumers (Config.Partitions).
// They keep leases, members and holds; walbox_release releases a hold. It is idempotent.
func ApplyConsumer(ctx context.Context, conn *pgx.Conn) error {
	return ApplyConsumerTable(ctx, conn, DefaultProcessedTable)
}

// ApplyConsumerTable creates the processed-messages table under another name (a consumer's
// Config.ProcessedTable). It is idempotent.
func ApplyConsumerTable(ctx context.Context, conn *pgx.Conn, table wire.Table) error {
	ms, err := load(consumerFS, "consumer", map[string]string{
		"Table":  table.Quoted(),
		"Schema": pgx.Identifier{table.Schema}.Sanitize(),
	})
	if err != nil {
		return err
	}
	_, err = run(ctx, conn, table.Schema, "consumer:"+table.String(), ms, "", nil)
	return err
}
