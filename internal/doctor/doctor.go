package doctor

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/walbox/walbox/outbox"
	"github.com/walbox/walbox/publisher"
)

// Timeout bounds each server's part of the checks.
const Timeout = 10 * time.Second

// Check is one line of `walbox doctor`.
type Check struct {
	Name    string `json:"name"`
	Status  string `json:"status"` // pass, warn or fail
	Message string `json:"message"`
	Fix     string `json:"fix,omitempty"`
}

func passCheck(name, format string, args ...any) Check {
	return Check{Name: name, Status: "pass", Message: fmt.Sprintf(format, args...)}
}

func warnCheck(name, fix, format string, args ...any) Check {
	return Check{Name: name, Status: "warn", Message: fmt.Sprintf(format, args...), Fix: fix}
}

func failCheck(name, fix, format string, args ...any) Check {
	return Check{Name: name, Status: "fail", Message: fmt.Sprintf(format, args...), Fix: fix}
}

// Config is what the checks need: the settings `walbox run` would use.
type Config struct {
	// DatabaseURL is the connection string walbox runs with.
	DatabaseURL string
	Slot        string
	Publication string
	// Prefix is the relayed message prefix, "" for none.
	Prefix string
	// Table is the outbox table when Mappings is empty. Its schema holds walbox's record, as for
	// walbox run.
	Table outbox.Table
	// Mappings are the outbox tables `walbox run` reads, as the config file maps them.
	Mappings []outbox.Mapping
	// Brokers has one configuration per RabbitMQ endpoint, in the order walbox dials them.
	Brokers []publisher.Config
	// RelayRole is the role `walbox run` logs in as, when doctor runs as another; "" for the role
	// of DatabaseURL.
	RelayRole string
	// FailoverSlot is walbox's --failover-slot: auto, on or off ("" is auto).
	FailoverSlot string
	// ReplicationURL is walbox's --replication-url: the hot standby it decodes on, "" for none.
	ReplicationURL string
	// Stream is walbox's stream mode (--stream-url), nil for none: the stream nodes are checked
	// instead of Brokers.
	Stream *StreamConfig
}

// doctor holds what the checks need.
type doctor struct {
	dsn         string
	slot        string
	publication string
	prefix      string             // the relayed message prefix, "" for none
	table       outbox.Table       // the first outbox table, for fixes
	registry    string             // the schema of walbox's record: --table's, where walbox migrate creates it
	mappings    []outbox.Mapping   // every outbox table `walbox run` reads
	brokers     []publisher.Config // one per endpoint
	relayRole   string             // the role walbox run logs in as, "" for doctor's own
	failover    string             // --failover-slot
	standby     string             // --replication-url
	stream      *StreamConfig      // --stream-url and --stream, nil for none
}

// Run performs every check, PostgreSQL's then RabbitMQ's, each server's within Timeout, and
// returns them in order. It declares the exchanges as `walbox run` would, and changes nothing
// in PostgreSQL.
func Run(ctx context.Context, cfg Config) []Check {
	d := newDoctor(cfg)
	pgCtx, cancel := context.WithTimeout(ctx, Timeout)
	checks := d.postgres(pgCtx)
	cancel()
	checks = append(checks, d.postgresTLS())
	if d.stream != nil {
		return append(checks, d.streamChecks(ctx)...)
	}
	checks = append(checks, d.brokerChecks(ctx)...)
	return append(checks, d.amqpTLS())
}

// newDoctor holds cfg for the checks.
func newDoctor(cfg Config) doctor {
	d := doctor{dsn: cfg.DatabaseURL, slot: cfg.Slot, publication: cfg.Publication, prefix: cfg.Prefix,
		table: cfg.Table, registry: cmp.Or(cfg.Table, outbox.DefaultTable).Schema, mappings: []outbox.Mapping{{Table: cfg.Table}}, brokers: cfg.Brokers, relayRole: cfg.RelayRole,
		failover: cfg.FailoverSlot, standby: cfg.ReplicationURL, stream: cfg.Stream}
	if len(cfg.Mappings) > 0 {
		d.mappings = cfg.Mappings
		d.table = d.mappings[0].WithDefaults().Table
	}
	return d
}

// Failed counts the failed checks.
func Failed(checks []Check) int {
	n := 0
	for _, c := range checks {
		if c.Status == "fail" {
			n++
		}
	}
	return n
}

// brokerChecks dials every RabbitMQ endpoint as `walbox run` does, and says which answer. The first
// that answers declares the exchanges, as run would. With several endpoints, one that does not
// answer is a warning: walbox fails over to the others. All of them not answering is a failure.
func (d doctor) brokerChecks(ctx context.Context) []Check {
	var checks []Check
	declared := false
	for _, cfg := range d.brokers {
		cfg.DialTimeout = Timeout
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
func (d doctor) dialCheck(ctx context.Context, cfg publisher.Config, declared bool) ([]Check, bool) {
	addr := amqpHost(cfg.URL)
	qs := &queueStates{}
	cfg.OnQueue = qs.add
	s, err := publisher.Dial(ctx, cfg)
	if err != nil {
		msg := err.Error()
		if strings.HasPrefix(msg, "declare ") || strings.HasPrefix(msg, "bind ") {
			return []Check{passCheck("broker", "RabbitMQ at %s accepts the connection", addr),
				failCheck("exchange", "walbox declares it durable, of type topic, with its alternate exchange as argument: "+
					"delete the exchange or match --exchange/--alternate-exchange; the user needs configure, write and "+
					"read permission on the vhost", "exchange %s: %s", cfg.Exchange, msg)}, true
		}
		if len(d.brokers) > 1 {
			return []Check{warnCheck("broker", brokerFix(msg), "RabbitMQ at %s (%d endpoints): not reachable: %s",
				addr, len(d.brokers), msg)}, false
		}
		return []Check{failCheck("broker", brokerFix(msg), "RabbitMQ at %s: %s", addr, msg)}, false
	}
	_ = s.Close()
	checks := []Check{passCheck("broker", "RabbitMQ at %s accepts the connection in confirm mode", addr)}
	if declared {
		return checks, true
	}
	alt := "no alternate exchange"
	if cfg.AlternateExchange != publisher.NoExchange {
		alt = "alternate exchange " + cfg.AlternateExchange
	}
	checks = append(checks, passCheck("exchange", "exchange %s declared or already there (topic, durable, %s); park exchange %s",
		cfg.Exchange, alt, cfg.ParkExchange))
	return append(checks, d.queueChecks(cfg, qs)...), true
}

// brokerFix suggests a fix for a failed dial, from its error text.
func brokerFix(msg string) string {
	low := strings.ToLower(msg)
	switch {
	case strings.Contains(low, "certificate") || strings.Contains(low, "x509") || strings.Contains(low, "tls"):
		return "the broker's certificate was not accepted: set --amqp-ca-file to the CA that signed it, and use the host name the certificate names"
	case strings.Contains(low, "(403)") || strings.Contains(low, "access_refused") || strings.Contains(low, "password"):
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
func (d doctor) amqpTLS() Check {
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
func (d doctor) postgresTLS() Check {
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
