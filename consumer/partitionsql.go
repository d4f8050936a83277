package consumer

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// partitionSQL is the SQL of a partitioned consumer. Its tables lie in the processed table's
// schema (migrations/consumer/002_partitions.sql). Every time is the database's clock.
type partitionSQL struct {
	// Members and leases. $1 is the consumer name throughout.
	beat, live, leave          string
	initLeases, renew, acquire string
	leaseCount                 string
	release                    string
	// fence checks this process's lease and locks it against a takeover until the transaction
	// ends. It also says whether the aggregate is held, locking the hold against its removal.
	fence string
	// Holds.
	hold, holdMessage, dueHolds, lockHold, headMessage string
	deleteHeld, deleteHold, endIfEmpty                 string
	handledHead, failHead                              string
	releaseFunc, heldCount                             string
}

func newPartitionSQL(schema string) partitionSQL {
	t := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	r := strings.NewReplacer(
		"MEMBERS", t("walbox_consumer_members"), "LEASES", t("walbox_consumer_leases"),
		"HOLDS", t("walbox_consumer_holds"), "HELD", t("walbox_held_messages"),
		"RELEASE", t("walbox_release"), "NOW", "pg_catalog.clock_timestamp()",
		"LEASE", "$3::pg_catalog.interval")
	return partitionSQL{
		beat: r.Replace(`INSERT INTO MEMBERS (consumer, member, expires_at) VALUES ($1, $2, NOW + LEASE)
			ON CONFLICT (consumer, member) DO UPDATE SET expires_at = excluded.expires_at`),
		live: r.Replace(`WITH gone AS (DELETE FROM MEMBERS WHERE consumer = $1 AND expires_at < NOW - $2::pg_catalog.interval)
			SELECT pg_catalog.count(*) FROM MEMBERS WHERE consumer = $1 AND expires_at > NOW`),
		leave: r.Replace(`DELETE FROM MEMBERS WHERE consumer = $1 AND member = $2`),
		initLeases: r.Replace(`INSERT INTO LEASES (consumer, partition)
			SELECT $1, g FROM pg_catalog.generate_series(0, $2::pg_catalog.int4 - 1) g ON CONFLICT DO NOTHING`),
		leaseCount: r.Replace(`SELECT pg_catalog.count(*) FROM LEASES WHERE consumer = $1`),
		renew: r.Replace(`UPDATE LEASES SET expires_at = NOW + LEASE
			WHERE consumer = $1 AND holder = $2 AND partition = ANY ($4::pg_catalog.int4[]) AND expires_at > NOW
			RETURNING partition`),
		// A lease that a handling transaction locked is skipped: its holder may still commit.
		acquire: r.Replace(`WITH free AS (
				SELECT partition FROM LEASES
				WHERE consumer = $1 AND partition < $4::pg_catalog.int4 AND expires_at <= NOW
				ORDER BY partition LIMIT $5::pg_catalog.int4 FOR UPDATE SKIP LOCKED)
			UPDATE LEASES l SET holder = $2, expires_at = NOW + LEASE
			FROM free WHERE l.consumer = $1 AND l.partition = free.partition
			RETURNING l.partition`),
		release: r.Replace(`UPDATE LEASES SET holder = '', expires_at = '-infinity'
			WHERE consumer = $1 AND partition = $2 AND holder = $3`),
		fence: r.Replace(`WITH lease AS (
				SELECT 1 FROM LEASES WHERE consumer = $1 AND partition = $2 AND holder = $3 AND expires_at > NOW
				FOR KEY SHARE),
			hold AS (SELECT 1 FROM HOLDS WHERE consumer = $1 AND aggregate_id = $4 FOR KEY SHARE)
			SELECT EXISTS (SELECT 1 FROM lease), EXISTS (SELECT 1 FROM hold)`),
		hold: r.Replace(`INSERT INTO HOLDS (consumer, aggregate_id, partition, attempts, retry_at, failed, error)
			VALUES ($1, $2, $3, $4, NOW + $5::pg_catalog.interval, $6, $7) ON CONFLICT (consumer, aggregate_id) DO NOTHING`),
		holdMessage: r.Replace(`INSERT INTO HELD (consumer, aggregate_id, partition, message_id, type, routing_key,
				exchange, content_type, headers, body, sent_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT (consumer, message_id) DO NOTHING`),
		dueHolds: r.Replace(`SELECT aggregate_id FROM HOLDS
			WHERE consumer = $1 AND partition = $2 AND NOT failed AND retry_at <= NOW
			ORDER BY retry_at LIMIT 64`),
		lockHold: r.Replace(`SELECT attempts, failed, skip_message FROM HOLDS
			WHERE consumer = $1 AND aggregate_id = $2 FOR UPDATE`),
		headMessage: r.Replace(`SELECT seq, message_id, type, routing_key, exchange, content_type, headers, body, sent_at
			FROM HELD WHERE consumer = $1 AND aggregate_id = $2 ORDER BY seq LIMIT 1`),
		deleteHeld: r.Replace(`DELETE FROM HELD WHERE consumer = $1 AND seq = $2`),
		deleteHold: r.Replace(`DELETE FROM HOLDS WHERE consumer = $1 AND aggregate_id = $2`),
		endIfEmpty: r.Replace(`DELETE FROM HOLDS h WHERE h.consumer = $1 AND h.aggregate_id = $2
			AND NOT EXISTS (SELECT 1 FROM HELD m WHERE m.consumer = $1 AND m.aggregate_id = $2)`),
		handledHead: r.Replace(`UPDATE HOLDS SET attempts = 0, skip_message = NULL
			WHERE consumer = $1 AND aggregate_id = $2`),
		failHead: r.Replace(`UPDATE HOLDS SET attempts = $3, failed = $4, error = $5, retry_at = NOW + $6::pg_catalog.interval
			WHERE consumer = $1 AND aggregate_id = $2 AND EXISTS (SELECT 1 FROM HELD m WHERE m.consumer = $1 AND m.seq = $7)`),
		releaseFunc: r.Replace(`SELECT RELEASE($1, $2, $3)`),
		heldCount:   r.Replace(`SELECT pg_catalog.count(*) FROM HELD WHERE consumer = $1`),
	}
}
