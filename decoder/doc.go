// Package decoder turns pgoutput messages into events. The events are the begin and commit of a
// transaction, and the outbox rows inserted in it. It reads logical replication protocol version 1,
// in text format, without streaming. See docs/architecture.md for the relay that feeds it.
//
// # Contract
//
// The package is pure: bytes in, values out. It does no I/O and does not log.
// Decode never panics, whatever its input: every length is checked before it is used.
// Every failure is returned as an *Error that carries the LSN of the message.
// Where known, the Error carries the message id, table and column too.
// Errors are classified by sentinels:
//   - ErrMalformed: truncated, garbled or unknown protocol data. Stop and reconnect.
//   - ErrBadRow: a row that can never become a message. Park it, see Error.Partial.
//   - ErrForeignTable: the publication holds a table walbox was not configured for.
//   - ErrStreaming: a streamed transaction, which walbox never asks for.
//
// Decode never keeps or returns memory of the data it is given: the caller may reuse its buffer.
// WithSharedPayload is the one exception: the payload of a row it returns shares that data.
//
// # LSNs
//
// Three LSNs appear, and only one of them may be confirmed to the server:
//
//   - The lsn passed to Decode (the XLogData's WALStart) only labels errors.
//     Several rows can share one, and it is no row's identity.
//     Relation and Type messages arrive with 0/0.
//     So does the Begin of a transaction replicated from another origin.
//   - Begin's FinalLSN and Commit's CommitLSN are the LSN of the transaction's commit record.
//     Confirming it would make the server send the whole transaction again.
//   - Commit's EndLSN (TransactionEndLSN) is the end of the commit record.
//     It is the only position the relay may confirm.
//     It may do so once every row of the transaction is safely published.
//
// # Rows
//
// A Decoder caches every Relation message by relation id, and maps columns by name using the
// latest one. So columns added, dropped or reordered mid-stream are handled.
// Each configured table has a wire.Mapping that names its columns.
// A Relation message is resolved against it once, so decoding a row only indexes.
// An Insert into a configured table becomes a KindRow event.
// The column names below are the default table's. A mapping may name others.
// Errors then name both, as in "kind (event_type) is NULL".
//
//   - The id (required) is the message id. Of type uuid it becomes Message.ID.
//     Of any other type (bigint, text, ...) its text becomes Message.MessageID.
//     Message.ID then stays zero. NULL or empty is a bad row.
//     With wire.IDFromPosition the table needs no id column.
//     Message.ID is then Origin.PositionID of the Origin given to SetOrigin.
//     Its arguments are Begin's FinalLSN and CommitTime, and the number of inserts before the row
//     in its transaction. The id is the same every time the transaction is sent again.
//   - The event_type (required) is a non-empty string.
//   - The payload (required) is JSON. It is validated unless the column is of type json or jsonb.
//     The server has validated those already.
//   - The aggregate_type and aggregate_id are strings; NULL or a missing column gives "".
//   - The headers are a JSON object. NULL, a missing column or an empty object gives a nil map.
//   - The created_at is timestamptz text in the ISO DateStyle with any UTC offset.
//     The replication session must use DateStyle ISO, the server default.
//     NULL or a missing column gives the zero time. CreatedAt and CommitTime are in UTC.
//   - The deliver_at has created_at's rules and becomes Message.DeliverAt.
//   - The exchange column, if the mapping has one, becomes Message.Exchange.
//     NULL or empty is a bad row.
//   - The routing key template, if the mapping has one, becomes Message.RoutingKey.
//     Every {column} in it is replaced by that column's text.
//     A NULL or missing column is a bad row naming it, and an empty key is a bad row too.
//
// A column the mapping marks absent ("-") is not read, and gives the zero value.
// A message id, exchange or routing key over 255 bytes is a bad row: AMQP cannot carry it.
//
// # Emitted messages
//
// WithMessagePrefix makes some logical decoding messages outbox messages too.
// Those are messages of pg_logical_emit_message whose prefix is exactly the given one.
// The plugin pgoutput sends them with the option messages 'true'.
// The emit function (wire.EmitFunction) writes them.
// Such a message becomes a KindRow event with an empty Table, in its place among the transaction's
// rows. Its content is a JSON object of version 1:
//
//	{"v": 1, "id": "<uuid>", "aggregate_type", "aggregate_id", "event_type", "payload",
//	 "headers", "created_at": "<ISO 8601 timestamptz>", "deliver_at": "<the same, optional>"}
//
// Each field has the column's meaning and rules above (id and event_type required).
// Content that breaks them is an ErrBadRow error whose Partial holds what could be decoded.
// So is a message that is not transactional.
// That is sent when written, even if its transaction then rolled back.
// A transactional message of any other prefix gives a KindOtherMessage event.
// It carries nothing, but it is one of the transaction's changes.
//
// Any other message is checked for well-formedness and gives a KindSkip event.
// Those are Relation, Type, Origin, Update, Delete, Truncate, and a non-transactional logical
// decoding message of another prefix.
package decoder
