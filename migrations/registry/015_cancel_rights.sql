-- walbox_cancel runs with its owner's rights. A role that may execute it may cancel any scheduled
-- message, so PUBLIC may not: the owner grants it to the producers, as it grants INSERT on the
-- outbox table.
REVOKE EXECUTE ON FUNCTION {{.Schema}}.walbox_cancel(text), {{.Schema}}.walbox_cancel(uuid) FROM PUBLIC;
