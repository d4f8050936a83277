-- The relay roles `walbox migrate --relay-role` granted EXECUTE on the record functions. walbox
-- doctor accepts these and fails any other role that may move the record. A role is kept by its
-- oid: a role dropped and created again under the same name is another role. Only the owner
-- writes it; migrate grants SELECT to each recorded role, so that doctor run as it can read it.
CREATE TABLE IF NOT EXISTS {{.Schema}}.walbox_relay_roles (
    role_oid    oid         PRIMARY KEY,
    role_name   text        NOT NULL,   -- the role's name when it was recorded, for people
    recorded_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);

REVOKE ALL ON {{.Schema}}.walbox_relay_roles FROM PUBLIC;
