package main

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

func addBrokerSettings(s *settings) *brokerSettings {
	return &brokerSettings{
		url: s.add("amqp-url", "WALBOX_AMQP_URL", "", amqpURLHelp),
		password: s.add("amqp-password", "WALBOX_AMQP_PASSWORD", "",
			"password for the AMQP URL's user, kept out of the URL (prefer the _FILE form)"),
		caFile:   s.add("amqp-ca-file", "WALBOX_AMQP_CA_FILE", "", "PEM CA bundle to verify the broker's certificate (amqps; default: system roots)"),
		certFile: s.add("amqp-cert-file", "WALBOX_AMQP_CERT_FILE", "", "PEM client certificate for amqps"),
		keyFile:  s.add("amqp-key-file", "WALBOX_AMQP_KEY_FILE", "", "PEM key of the client certificate"),
		exchange: s.add("exchange", "WALBOX_EXCHANGE", "outbox", "topic exchange to publish to (declared durable)"),
		alternate: s.add("alternate-exchange", "WALBOX_ALTERNATE_EXCHANGE", "",
			"exchange that keeps messages no queue is bound for (default <exchange>.unroutable; \"none\": unroutable messages stall the stream until a queue is bound)"),
		park: s.add("park-exchange", "WALBOX_PARK_EXCHANGE", "", "exchange for rows that can never be delivered (default <exchange>.parked)"),
		queueType: s.add("queue-type", "WALBOX_QUEUE_TYPE", "classic",
			"type of the park and alternate queues walbox declares: classic, or quorum (use quorum on a cluster: a classic queue is unavailable while its node is down)"),
		maxSize: s.add("max-message-size", "WALBOX_MAX_MESSAGE_SIZE", "16777216",
			"largest message body in bytes; larger rows are parked (keep at or below the broker's max_message_size)"),
		window: s.add("window", "WALBOX_WINDOW", "1024", "most messages published and not yet confirmed"),
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
