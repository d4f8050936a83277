package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/walbox/walbox/internal/doctor"
	"github.com/walbox/walbox/internal/redact"
	"github.com/walbox/walbox/streampub"
)

func runDoctor(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommon("doctor")
	b := brokerSettingsOf(&c.s)
	asJSON, relayRole := c.s.get("json"), c.s.get("relay-role")
	fs := newFlagSet("doctor", "Check that PostgreSQL and RabbitMQ are ready for walbox, with the fix for each failure; "+
		"like `walbox run` it declares the exchanges", stderr)
	if err := c.parse(fs, args); err != nil {
		return err
	}
	cfg := doctor.Config{Slot: c.slot.value, Publication: c.publication.value, Prefix: relayedPrefix(c.messagePrefix.value),
		Mappings: c.mappings(), RelayRole: relayRole.value}
	failover, err := c.failover()
	if err != nil {
		return err
	}
	cfg.FailoverSlot = string(failover)
	if cfg.ReplicationURL, err = c.replicationDSN(); err != nil {
		return err
	}
	if cfg.DatabaseURL, err = c.dsn(); err != nil {
		return err
	}
	if cfg.Table, err = c.outboxTable(); err != nil {
		return err
	}
	if cfg.Stream, err = doctorStream(c); err != nil {
		return err
	}
	if cfg.Stream == nil {
		if cfg.Brokers, err = b.configs(c, "walbox-doctor"); err != nil {
			return err
		}
	}
	wantJSON, err := asJSON.bool()
	if err != nil {
		return err
	}

	checks := doctor.Run(ctx, cfg)
	secrets := c.secrets()
	for i := range checks {
		checks[i].Message = redact.Text(checks[i].Message, secrets...)
		checks[i].Fix = redact.Text(checks[i].Fix, secrets...)
	}
	failed := doctor.Failed(checks)
	if err := printChecks(stdout, checks, failed == 0, wantJSON); err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d checks failed", failed, len(checks))
	}
	return nil
}

func printChecks(w io.Writer, checks []doctor.Check, ok, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			OK     bool           `json:"ok"`
			Checks []doctor.Check `json:"checks"`
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

// doctorStream returns the stream mode's nodes and stream when --stream-url is set, as run takes
// them; nil otherwise.
func doctorStream(c *common) (*doctor.StreamConfig, error) {
	u, name := c.s.get("stream-url"), c.s.get("stream")
	if u.value == "" {
		return nil, nil
	}
	uris, err := streampub.ParseURIs(u.value)
	if err != nil {
		return nil, badSetting(u, "%v", err)
	}
	if name.value == "" {
		return nil, badSetting(name, "required with --stream-url")
	}
	return &doctor.StreamConfig{URIs: uris, Stream: name.value}, nil
}
