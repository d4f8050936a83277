package main

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// explainAuth turns a refused login into one line that says so. pgconn tries TLS and then
// plaintext (sslmode=prefer) and reports every attempt, the TLS refusal first; the cause is the
// server's error further down the chain.
func explainAuth(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || (pgErr.Code != "28P01" && pgErr.Code != "28000") {
		return err
	}
	user := "?"
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) && ce.Config != nil {
		user = ce.Config.User
	}
	fix := "check the password (--database-password, or the URL's)"
	if pgErr.Code == "28000" {
		fix = "add a pg_hba.conf line for this user, database and address, then reload PostgreSQL"
	}
	return fmt.Errorf("postgres refused user %q: authentication failed (SQLSTATE %s: %s); %s", user, pgErr.Code, pgErr.Message, fix)
}
