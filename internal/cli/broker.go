package cli

import (
	"github.com/walbox/walbox/internal/redact"
	"github.com/walbox/walbox/outbox"
	"github.com/walbox/walbox/publisher"
)

// brokers returns the publisher's endpoints: each URL of --amqp-url with run's broker settings.
// The recover command dials them to publish exactly alike. The doctor command checks what run
// would meet. The connection is named appID, which is also every message's app-id.
func (c *common) brokers(appID string) (*publisher.Endpoints, error) {
	urls, err := c.amqpURLs()
	if err != nil {
		return nil, err
	}
	pcfg := c.v.pub
	pcfg.URL, pcfg.Window, pcfg.AppID = urls[0], c.v.relay.Window, appID
	if pcfg.TLS, err = amqpTLS(c.v.caFile, c.v.certFile, c.v.keyFile); err != nil {
		return nil, badSetting(c.s.get("amqp-ca-file"), "%v", err)
	}
	if err := pcfg.Validate(); err != nil {
		return nil, configError{redact.Text(err.Error(), c.secrets()...)}
	}
	eps, err := publisher.NewEndpoints(pcfg, urls)
	if err != nil {
		return nil, configError{redact.Text(err.Error(), c.secrets()...)}
	}
	return eps, nil
}

// mappings returns the outbox tables of the config file, if it names any.
func (c *common) mappings() []outbox.Mapping {
	if c.s.file != nil && len(c.s.file.tables) > 0 {
		return c.s.file.tables
	}
	return nil
}
