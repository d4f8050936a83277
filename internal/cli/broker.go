package cli

import (
	"github.com/walbox/walbox/internal/redact"
	"github.com/walbox/walbox/outbox"
	"github.com/walbox/walbox/publisher"
)

// brokerSettings are the RabbitMQ settings of `walbox run`, for the commands that dial the broker
// as it does: recover must publish exactly alike, doctor checks what run would meet.
type brokerSettings struct {
	url, password, caFile, certFile, keyFile, exchange, alternate, park, queueType, maxSize, window *setting
}

func brokerSettingsOf(s *settings) *brokerSettings {
	return &brokerSettings{
		url: s.get("amqp-url"), password: s.get("amqp-password"),
		caFile: s.get("amqp-ca-file"), certFile: s.get("amqp-cert-file"), keyFile: s.get("amqp-key-file"),
		exchange: s.get("exchange"), alternate: s.get("alternate-exchange"), park: s.get("park-exchange"),
		queueType: s.get("queue-type"), maxSize: s.get("max-message-size"), window: s.get("window"),
	}
}

// config returns the publisher's configuration, validated, with the first URL of --amqp-url;
// appID names the connection and is every message's app-id.
func (b *brokerSettings) config(c *common, appID string) (publisher.Config, error) {
	var pcfg publisher.Config
	urls, err := amqpURLs(b.url, b.password)
	if err != nil {
		return pcfg, err
	}
	pcfg.URL = urls[0]
	if pcfg.TLS, err = amqpTLS(b.caFile.value, b.certFile.value, b.keyFile.value); err != nil {
		return pcfg, badSetting(b.caFile, "%v", err)
	}
	if pcfg.Window, err = b.window.int(); err != nil {
		return pcfg, err
	}
	if pcfg.MaxMessageSize, err = b.maxSize.int(); err != nil {
		return pcfg, err
	}
	pcfg.Exchange, pcfg.AppID = b.exchange.value, appID
	pcfg.AlternateExchange, pcfg.ParkExchange, pcfg.QueueType = b.alternate.value, b.park.value, b.queueType.value
	if err := pcfg.Validate(); err != nil {
		return pcfg, configError{redact.Text(err.Error(), c.secrets()...)}
	}
	return pcfg, nil
}

// endpoints returns every URL of --amqp-url with the publisher's configuration, each validated.
func (b *brokerSettings) endpoints(c *common, appID string) (*publisher.Endpoints, error) {
	pcfg, err := b.config(c, appID)
	if err != nil {
		return nil, err
	}
	urls, err := amqpURLs(b.url, b.password)
	if err != nil {
		return nil, err
	}
	eps, err := publisher.NewEndpoints(pcfg, urls)
	if err != nil {
		return nil, configError{redact.Text(err.Error(), c.secrets()...)}
	}
	return eps, nil
}

// configs returns the publisher's configuration for every URL of --amqp-url.
func (b *brokerSettings) configs(c *common, appID string) ([]publisher.Config, error) {
	eps, err := b.endpoints(c, appID)
	if err != nil {
		return nil, err
	}
	return eps.Configs(), nil
}

// mappings returns the outbox tables of the config file, if it names any.
func (c *common) mappings() []outbox.Mapping {
	if c.s.file != nil && len(c.s.file.tables) > 0 {
		return c.s.file.tables
	}
	return nil
}
