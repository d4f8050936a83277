package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/logs"

	"github.com/walbox/walbox/internal/doctor"
	"github.com/walbox/walbox/internal/redact"
)

func runDoctor(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommon("doctor")
	fs := newFlagSet("doctor", "Check that PostgreSQL and RabbitMQ are ready for walbox, with the fix for each failure; "+
		"like `walbox run` it declares the exchanges", stderr)
	if err := c.parse(fs, args); err != nil {
		return err
	}
	r := c.v.relay
	cfg := doctor.Config{DatabaseURL: r.DatabaseURL, ReplicationURL: r.ReplicationURL, Slot: r.Slot, Publication: r.Publication,
		Table: r.Table, Prefix: relayedPrefix(r.MessagePrefix), Mappings: c.mappings(), RelayRole: c.v.relayRole,
		FailoverSlot: string(r.FailoverSlot)}
	var err error
	if cfg.Stream, err = doctorStream(c); err != nil {
		return err
	}
	if cfg.Stream != nil {
		logs.SetLogger(quietStreamClient{})
	}
	if cfg.Stream == nil {
		eps, err := c.brokers("walbox-doctor")
		if err != nil {
			return err
		}
		cfg.Brokers = eps.Configs()
	}

	checks := doctor.Run(ctx, cfg)
	secrets := c.secrets()
	for i := range checks {
		checks[i].Message = redact.Text(checks[i].Message, secrets...)
		checks[i].Fix = redact.Text(checks[i].Fix, secrets...)
	}
	failed := doctor.Failed(checks)
	if err := printChecks(stdout, checks, failed == 0, c.v.json); err != nil {
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
	s := c.v.stream
	if len(s.URIs) == 0 {
		return nil, nil
	}
	if s.Stream == "" {
		return nil, badSetting(c.s.get("stream"), "required with --stream-url")
	}
	return &doctor.StreamConfig{URIs: s.URIs, Stream: s.Stream}, nil
}
