package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// explainAuth turns a refused login into one line that says so. With sslmode=prefer, pgconn tries
// TLS and then plaintext, and reports every attempt, the TLS refusal first. The cause is the
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
	return fmt.Errorf("postgres refused user %q: authentication failed (SQLSTATE %s: %s); %s", user, pgErr.Code, pgErr.Message, authFix(pgErr))
}

// authFix names the way out of a refused login.
func authFix(pgErr *pgconn.PgError) string {
	switch {
	case pgErr.Code == "28P01":
		return "check the password (--database-password, or the URL's)"
	case strings.Contains(pgErr.Message, "does not exist"):
		return "fix the user in --database-url, or create the role (LOGIN REPLICATION)"
	case strings.Contains(pgErr.Message, "pg_hba.conf"):
		return "add a pg_hba.conf line for this user, database and address (replication connections match the database name), then reload PostgreSQL"
	}
	return "check the user and password in --database-url, and pg_hba.conf"
}
