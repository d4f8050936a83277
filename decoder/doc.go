// Package decoder turns pgoutput messages (logical replication protocol version 1, text
// format, no streaming) into events: the begin and commit of a transaction, and the outbox rows
// inserted in it.
//
// # Contract
//
// The package is pure: bytes in, values out. It does no I/O and does not log. Decode never
// panics, whatever its input: every length is checked before it is used, and every failure is
// returned as an *Error that carries the LSN of the message and, where known, the message id,
// table and column. Errors are classified by sentinels: ErrMalformed (truncated, garbled or
// unknown protocol data: stop and reconnect), ErrBadRow (a row that can never become a message:
// park it, see Error.Partial), ErrForeignTable (the publication holds a table walbox was not
// configured for) and ErrStreaming (a streamed transaction, which walbox never asks for).
//
// Decode never keeps or returns memory of the data it is given: the caller may reuse its buffer.
// WithSharedPayload is the one exception: the payload of a row it returns shares that data.
//
// # LSNs
//
// Three LSNs appear, and only one of them may be confirmed to the server:
//
//   - the lsn passed to Decode (the XLogData's WALStart) only labels errors. Several rows can
//     share one, Relation and Type messages (and the Begin of a transaction replicated from
//     another origin) arrive with 0/0, and it is no row's identity;
//   - Begin's FinalLSN and Commit's CommitLSN are the LSN of the transaction's commit record;
//     confirming it would make the server send the whole transaction again;
//   - Commit's EndLSN (TransactionEndLSN) is the end of the commit record: the only position
//     the relay may confirm, once every row of the transaction is safely published.
//
// # Rows
//
// A Decoder caches every Relation message by relation id, and maps columns by name using the
// latest one, so columns added, dropped or reordered mid-stream are handled. Each configured
// table has a wire.Mapping that names its columns; a Relation message is resolved against
// it once, so decoding a row only indexes. An Insert into a configured table becomes a KindRow
// event (the column names below are the default table's; a mapping may name others, and
// errors then name both, as in "kind (event_type) is NULL"):
//
//   - id (required) is the message id. Of type uuid it becomes Message.ID; of any other type
//     (bigint, text, ...) its text becomes Message.MessageID, and Message.ID stays zero; NULL
//     or empty is a bad row. With wire.IDFromPosition the table needs no id column: Message.ID
//     is Origin.PositionID(Begin's FinalLSN, the number of inserts before the row in its
//     transaction) of the Origin given to SetOrigin, the same every time the transaction is sent
//     again;
//   - event_type (required) is a non-empty string;
//   - payload (required) is JSON; it is validated unless the column is of type json or jsonb,
//     which the server has validated already;
//   - aggregate_type and aggregate_id are strings; NULL or a missing column gives "";
//   - headers is a JSON object; NULL, a missing column or an empty object gives a nil map;
//   - created_at is timestamptz text in the ISO DateStyle with any UTC offset (the replication
//     session must use DateStyle ISO, the server default); NULL or a missing column gives the
//     zero time. CreatedAt and CommitTime are in UTC;
//   - the exchange column, if the mapping has one, becomes Message.Exchange; NULL or empty is a
//     bad row;
//   - the routing key template, if the mapping has one, becomes Message.RoutingKey with every
//     {column} replaced by that column's text; a NULL or missing column is a bad row naming it,
//     and an empty key is a bad row too.
//
// A column the mapping marks absent ("-") is not read, and gives the zero value. A message id,
// exchange or routing key over 255 bytes, which AMQP cannot carry, is a bad row.
//
// # Emitted messages
//
// With WithMessagePrefix, a logical decoding message (pg_logical_emit_message, sent by pgoutput
// with the option messages 'true') whose prefix is exactly the given one is an outbox message
// too, as the emit function (wire.EmitFunction) writes it, and becomes a KindRow event with an
// empty Table, in its place among the transaction's rows. Its content is a JSON object of version
// 1: {"v": 1, "id": "<uuid>", "aggregate_type", "aggregate_id", "event_type", "payload",
// "headers", "created_at": "<ISO 8601 timestamptz>"}, each field with the column's meaning and
// rules above (id and event_type required). Content that breaks them, and a message that is not
// transactional (sent when written, even if its transaction then rolled back), is an ErrBadRow
// error whose Partial holds what could be decoded. A transactional message of any other prefix
// gives a KindOtherMessage event: it carries nothing, but it is one of the transaction's changes.
//
// Any other message (Relation, Type, Origin, Update, Delete, Truncate, a non-transactional
// logical decoding message of another prefix) is checked for well-formedness and gives a
// KindSkip event.
package decoder
