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
	"github.com/walbox/walbox/shard"
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
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return configError{fmt.Sprintf("unexpected argument %q (%s --help lists the flags)", fs.Arg(0), fs.Name())}
	}
	return nil
}

// parseFlags parses args into fs, one line for a bad flag, and leaves the arguments after the
// flags in fs.Args().
func parseFlags(fs *flag.FlagSet, args []string) error {
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
	return nil
}

// flagError turns the flag package's error into one line instead of the whole usage. An unknown
// flag gets the nearest known one, and where to find the rest.
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

// common holds a command's settings and the typed values they bind to.
type common struct {
	s settings
	v *values
}

func newCommon(cmd string) *common {
	return &common{s: newSettings(cmd), v: newValues()}
}

// parse registers the command's settings on fs and parses args. It then resolves each setting
// from flags, environment and the config file, and binds it to its typed field.
func (c *common) parse(fs *flag.FlagSet, args []string) error {
	c.s.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	return c.settle()
}

// parseWithArgs parses as parse does, but takes arguments between and after the flags. It returns
// them in order.
func (c *common) parseWithArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	c.s.register(fs)
	var rest []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		rest, args = append(rest, fs.Arg(0)), fs.Args()[1:]
	}
	return rest, c.settle()
}

// settle resolves each setting from flags, environment and the config file, and binds it.
func (c *common) settle() error {
	if err := c.s.resolve(); err != nil {
		return err
	}
	if err := c.s.bind(c.v); err != nil {
		return err
	}
	return c.databaseURLs()
}

// databaseURLs puts --database-password into --database-url and --replication-url. Each is parsed
// here, before anything starts, so that a malformed URL is a bad setting (exit 2).
func (c *common) databaseURLs() error {
	r := &c.v.relay
	for _, u := range []struct {
		dsn  *string
		flag string
	}{{&r.DatabaseURL, "database-url"}, {&r.ReplicationURL, "replication-url"}} {
		if *u.dsn == "" {
			continue
		}
		dsn, err := withPGPassword(*u.dsn, c.v.dbPassword)
		if err != nil {
			return badSetting(c.s.get("database-password"), "%v", err)
		}
		if _, err := pgconn.ParseConfig(dsn); err != nil {
			return badSetting(c.s.get(u.flag), "%s", redact.Text(err.Error(), c.secrets()...))
		}
		*u.dsn = dsn
	}
	return nil
}

// set returns the base set of slots and publications: the slot and publication settings.
func (c *common) set() shard.Set {
	return shard.Set{Slot: c.v.relay.Slot, Publication: c.v.relay.Publication}
}

// fail returns err as the command's final error. A refused login is said plainly, and no
// password of this command's settings is in it.
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
