package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/walbox/walbox/internal/redact"
	"github.com/walbox/walbox/outbox"
)

var errHelp = errors.New("help shown")

func newFlagSet(name, summary string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("walbox "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: walbox %s [flags]\n\n%s.\n\nFlags (a flag wins over its environment variable):\n", name, summary)
		fs.PrintDefaults()
	}
	return fs
}

func parse(fs *flag.FlagSet, args []string) error {
	usage, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = usage
	fs.SetOutput(out)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage()
			return errHelp
		}
		return flagError(fs, err)
	}
	if fs.NArg() > 0 {
		return configError{fmt.Sprintf("unexpected argument %q (%s --help lists the flags)", fs.Arg(0), fs.Name())}
	}
	return nil
}

// flagError turns the flag package's error into one line: an unknown flag with the nearest known
// one, and where to find the rest, instead of the whole usage.
func flagError(fs *flag.FlagSet, err error) error {
	help := fmt.Sprintf(" (%s --help lists the flags)", fs.Name())
	name, unknown := strings.CutPrefix(err.Error(), "flag provided but not defined: ")
	if !unknown {
		return configError{strings.ReplaceAll(err.Error(), " -", " --") + help}
	}
	name = strings.TrimLeft(name, "-")
	var flags []string
	fs.VisitAll(func(f *flag.Flag) { flags = append(flags, f.Name) })
	return configError{fmt.Sprintf("unknown flag --%s%s%s", name, didYouMean(name, flags, "--%s"), help)}
}

// common holds the settings every database command shares.
type common struct {
	s                                                       settings
	databaseURL, databasePassword, slot, publication, table *setting
	messagePrefix                                           *setting
	failoverSlot, replicationURL                            *setting // nil unless the command has them
}

func newCommon(cmd string) *common {
	c := &common{s: newSettings(cmd)}
	c.databaseURL, c.databasePassword = c.s.get("database-url"), c.s.get("database-password")
	c.slot, c.publication, c.table = c.s.get("slot"), c.s.get("publication"), c.s.get("table")
	c.messagePrefix = c.s.get("message-prefix")
	c.failoverSlot, c.replicationURL = c.s.find("failover-slot"), c.s.find("replication-url")
	return c
}

// parse registers the command's settings on fs, parses args and resolves every setting from
// flags, environment and the config file.
func (c *common) parse(fs *flag.FlagSet, args []string) error {
	c.s.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	return c.s.resolve()
}

// dsn returns the database connection string with the password setting applied.
func (c *common) dsn() (string, error) {
	dsn, err := c.databaseURL.required()
	if err != nil {
		return "", err
	}
	dsn, err = withPGPassword(dsn, c.databasePassword.value)
	if err != nil {
		return "", badSetting(c.databasePassword, "%v", err)
	}
	// Parsed here, before anything starts, so that a malformed URL is a bad setting (exit 2).
	if _, err := pgconn.ParseConfig(dsn); err != nil {
		return "", badSetting(c.databaseURL, "%s", redact.Text(err.Error(), c.secrets()...))
	}
	return dsn, nil
}

func (c *common) outboxTable() (outbox.Table, error) {
	t, err := outbox.ParseTable(c.table.value)
	if err != nil {
		return outbox.Table{}, badSetting(c.table, "%v", err)
	}
	return t, nil
}

// fail returns err as the command's final error: a refused login said plainly, and no password
// of this command's settings in it.
func (c *common) fail(err error) error {
	text := redact.Text(explainAuth(err).Error(), c.secrets()...)
	if ce := (configError{}); errors.As(err, &ce) {
		return configError{text} // a bad setting stays one: it exits 2
	}
	return errors.New(text)
}

// secrets are the passwords in this command's connection settings.
func (c *common) secrets() []string {
	var conns, raw []string
	for _, st := range c.s.list {
		conns = append(conns, st.value)
		if strings.Contains(st.flag, "password") && st.value != "" {
			raw = append(raw, st.value)
		}
	}
	return append(append(redact.Secrets(conns...), raw...), envSecrets()...)
}

// signalContext is cancelled by the first SIGINT or SIGTERM; a second one exits at once.
func signalContext(parent context.Context, onSecond func()) (context.Context, func()) {
	ctx, cancel := context.WithCancel(parent)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-done:
			return
		}
		select {
		case <-sigs:
			onSecond()
			os.Exit(1)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel()
	}
}
