package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/walbox/walbox/internal/redact"
	"github.com/walbox/walbox/outbox"
	"github.com/walbox/walbox/publisher"
)

// doctorTimeout bounds each server's part of `walbox doctor`.
const doctorTimeout = 10 * time.Second

// check is one line of `walbox doctor`.
type check struct {
	Name    string `json:"name"`
	Status  string `json:"status"` // pass, warn or fail
	Message string `json:"message"`
	Fix     string `json:"fix,omitempty"`
}

func passCheck(name, format string, args ...any) check {
	return check{Name: name, Status: "pass", Message: fmt.Sprintf(format, args...)}
}

func warnCheck(name, fix, format string, args ...any) check {
	return check{Name: name, Status: "warn", Message: fmt.Sprintf(format, args...), Fix: fix}
}

func failCheck(name, fix, format string, args ...any) check {
	return check{Name: name, Status: "fail", Message: fmt.Sprintf(format, args...), Fix: fix}
}

// doctor holds what the checks need: the settings `walbox run` would use.
type doctor struct {
	dsn         string
	slot        string
	publication string
	prefix      string             // the relayed message prefix, "" for none
	table       outbox.Table       // the first outbox table, for fixes
	mappings    []outbox.Mapping   // every outbox table `walbox run` reads, as the config file maps it
	brokers     []publisher.Config // one per --amqp-url endpoint
}

func runDoctor(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommon()
	b := addBrokerSettings(&c.s)
	asJSON := c.s.addBool("json", "", "false", "print JSON for scripts")
	fs := newFlagSet("doctor", "Check that PostgreSQL and RabbitMQ are ready for walbox, with the fix for each failure; "+
		"like `walbox run` it declares the exchanges", stderr)
	if err := c.parse(fs, args); err != nil {
		return err
	}
	d := doctor{slot: c.slot.value, publication: c.publication.value, prefix: relayedPrefix(c.messagePrefix.value)}
	var err error
	if d.dsn, err = c.dsn(); err != nil {
		return err
	}
	if d.table, err = c.outboxTable(); err != nil {
		return err
	}
	d.mappings = []outbox.Mapping{{Table: d.table}}
	if c.s.file != nil && len(c.s.file.tables) > 0 {
		d.mappings = c.s.file.tables
		d.table = d.mappings[0].WithDefaults().Table
	}
	if d.brokers, err = b.configs(c, "walbox-doctor"); err != nil {
		return err
	}
	wantJSON, err := asJSON.bool()
	if err != nil {
		return err
	}

	checks := d.run(ctx)
	secrets := c.secrets()
	failed := 0
	for i := range checks {
		checks[i].Message = redact.Text(checks[i].Message, secrets...)
		checks[i].Fix = redact.Text(checks[i].Fix, secrets...)
		if checks[i].Status == "fail" {
			failed++
		}
	}
	if err := printChecks(stdout, checks, failed == 0, wantJSON); err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d checks failed", failed, len(checks))
	}
	return nil
}

// run performs every check: PostgreSQL's, then RabbitMQ's.
func (d doctor) run(ctx context.Context) []check {
	pgCtx, cancel := context.WithTimeout(ctx, doctorTimeout)
	checks := d.postgres(pgCtx)
	cancel()
	checks = append(checks, d.postgresTLS())
	checks = append(checks, d.brokerChecks(ctx)...)
	return append(checks, d.amqpTLS())
}

func printChecks(w io.Writer, checks []check, ok, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			OK     bool    `json:"ok"`
			Checks []check `json:"checks"`
		}{ok, checks})
	}
	for _, c := range checks {
		fmt.Fprintf(w, "%s  %s\n", strings.ToUpper(c.Status), c.Message)
		if c.Fix != "" {
			fmt.Fprintf(w, "      fix: %s\n", c.Fix)
		}
	}
	return nil
}

// brokerChecks dials every RabbitMQ endpoint as `walbox run` does, and says which answer. The
// first that answers declares the exchanges, as run would. With several endpoints, one that does
// not answer is a warning (walbox fails over to the others), all of them a failure.
func (d doctor) brokerChecks(ctx context.Context) []check {
	var checks []check
	declared := false
	for _, cfg := range d.brokers {
		cfg.DialTimeout = doctorTimeout
		c, ok := d.dialCheck(ctx, cfg, declared)
		checks = append(checks, c...)
		declared = declared || ok
	}
	if !declared && len(d.brokers) > 1 {
		checks = append(checks, failCheck("broker", "walbox needs at least one node of the cluster",
			"none of the %d RabbitMQ endpoints accepts the connection", len(d.brokers)))
	}
	return checks
}

// dialCheck dials one endpoint. Unless declared, it reports on the exchange declaration too. It
// reports whether the broker accepted the connection.
func (d doctor) dialCheck(ctx context.Context, cfg publisher.Config, declared bool) ([]check, bool) {
	addr := amqpHost(cfg.URL)
	s, err := publisher.Dial(ctx, cfg)
	if err != nil {
		msg := err.Error()
		if strings.HasPrefix(msg, "declare ") || strings.HasPrefix(msg, "bind ") {
			return []check{passCheck("broker", "RabbitMQ at %s accepts the connection", addr),
				failCheck("exchange", "walbox declares it durable, of type topic, with its alternate exchange as argument: "+
					"delete the exchange or match --exchange/--alternate-exchange; the user needs configure, write and "+
					"read permission on the vhost", "exchange %s: %s", cfg.Exchange, msg)}, true
		}
		if len(d.brokers) > 1 {
			return []check{warnCheck("broker", brokerFix(msg), "RabbitMQ at %s (%d endpoints): not reachable: %s",
				addr, len(d.brokers), msg)}, false
		}
		return []check{failCheck("broker", brokerFix(msg), "RabbitMQ at %s: %s", addr, msg)}, false
	}
	_ = s.Close()
	checks := []check{passCheck("broker", "RabbitMQ at %s accepts the connection in confirm mode", addr)}
	if declared {
		return checks, true
	}
	alt := "no alternate exchange"
	if cfg.AlternateExchange != publisher.NoExchange {
		alt = "alternate exchange " + cfg.AlternateExchange
	}
	return append(checks, passCheck("exchange", "exchange %s declared or already there (topic, durable, %s); park exchange %s",
		cfg.Exchange, alt, cfg.ParkExchange)), true
}

// brokerFix suggests a fix for a failed dial, from its error text.
func brokerFix(msg string) string {
	low := strings.ToLower(msg)
	switch {
	case strings.Contains(low, "certificate") || strings.Contains(low, "x509") || strings.Contains(low, "tls"):
		return "the broker's certificate was not accepted: set --amqp-ca-file to the CA that signed it, and use the host name the certificate names"
	case strings.Contains(low, "403") || strings.Contains(low, "access_refused") || strings.Contains(low, "password"):
		return "check the user and password (--amqp-password or WALBOX_AMQP_PASSWORD_FILE); the user needs permissions on the vhost " +
			"(rabbitmqctl set_permissions), and guest may only connect from localhost"
	case strings.Contains(low, "vhost"):
		return "check the vhost in --amqp-url (the path after the host, %2F for the default /)"
	}
	return "check the host and port in --amqp-url (WALBOX_AMQP_URL), that RabbitMQ runs and that this host can reach it"
}

// amqpHost returns the host:port of an AMQP URL, without credentials.
func amqpHost(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(unparsable url)"
	}
	return u.Host
}

// amqpTLS checks whether the broker connections are encrypted, every one of them.
func (d doctor) amqpTLS() check {
	plain := 0
	for _, b := range d.brokers {
		if u, err := url.Parse(b.URL); err != nil || u.Scheme != "amqps" {
			plain++
		}
	}
	if plain == 0 {
		roots := "the system roots"
		if tls := d.brokers[0].TLS; tls != nil && tls.RootCAs != nil {
			roots = "--amqp-ca-file"
		}
		return passCheck("amqp_tls", "RabbitMQ connection uses TLS (amqps), the broker verified against %s", roots)
	}
	return warnCheck("amqp_tls", "use amqps:// (port 5671 by default) with --amqp-ca-file, unless the broker is on this host",
		"%s plaintext (amqp://): credentials and messages cross the network unencrypted", plainCount(plain, len(d.brokers)))
}

func plainCount(plain, all int) string {
	if all == 1 {
		return "RabbitMQ connection is"
	}
	return fmt.Sprintf("%d of %d RabbitMQ endpoints are", plain, all)
}

// postgresTLS checks the sslmode of the database URL: only verify-full authenticates the server.
func (d doctor) postgresTLS() check {
	cfg, err := pgconn.ParseConfig(d.dsn)
	if err == nil && strings.HasPrefix(cfg.Host, "/") {
		return passCheck("postgres_tls", "PostgreSQL connection uses a Unix socket (%s): TLS does not apply", cfg.Host)
	}
	mode := sslmode(d.dsn)
	const fix = "add sslmode=verify-full (and sslrootcert=<CA file>) to --database-url"
	switch mode {
	case "verify-full":
		return passCheck("postgres_tls", "sslmode = verify-full: the connection is encrypted and the server authenticated")
	case "require", "verify-ca":
		return warnCheck("postgres_tls", fix, "sslmode = %s: encrypted, but the server's host name is not verified", mode)
	case "disable", "allow", "prefer":
		return warnCheck("postgres_tls", fix, "sslmode = %s: the connection may be plaintext and the server is not authenticated", mode)
	}
	return warnCheck("postgres_tls", fix, "sslmode = %q: not a mode walbox knows", mode)
}

// sslmode returns the sslmode of a PostgreSQL URL or keyword string, else of PGSSLMODE, else
// libpq's default "prefer".
func sslmode(dsn string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		if u, err := url.Parse(dsn); err == nil && u.Query().Get("sslmode") != "" {
			return u.Query().Get("sslmode")
		}
	} else {
		for _, f := range strings.Fields(dsn) {
			if k, v, ok := strings.Cut(f, "="); ok && strings.TrimSpace(k) == "sslmode" {
				return strings.Trim(v, "'")
			}
		}
	}
	if m := os.Getenv("PGSSLMODE"); m != "" {
		return m
	}
	return "prefer"
}

// hostPort renders a PostgreSQL host for messages.
func hostPort(cfg *pgconn.Config) string {
	if strings.HasPrefix(cfg.Host, "/") {
		return cfg.Host
	}
	return net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port))
}
