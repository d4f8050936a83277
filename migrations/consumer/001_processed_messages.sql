-- The table a consumer records each message it handled in, in the handler's transaction, so that
-- a redelivered message is recognised and skipped. message_id is text: it comes from the AMQP
-- message-id property, which need not be a UUID.
CREATE TABLE IF NOT EXISTS {{.Table}} (
    message_id   text        NOT NULL,
    consumer     text        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (consumer, message_id)
);
