package main

import (
	"github.com/walbox/walbox/internal/redact"
	"github.com/walbox/walbox/outbox"
	"github.com/walbox/walbox/publisher"
)

// brokerSettings are the RabbitMQ settings of `walbox run`, for the commands that dial the broker
// as it does: recover must publish exactly alike, doctor checks what run would meet.
type brokerSettings struct {
	url, password, caFile, certFile, keyFile, exchange, alternate, park, maxSize, window *setting
}

func addBrokerSettings(s *settings) *brokerSettings {
	return &brokerSettings{
		url: s.add("amqp-url", "WALBOX_AMQP_URL", "", "RabbitMQ URL, amqp:// or amqps://"),
		password: s.add("amqp-password", "WALBOX_AMQP_PASSWORD", "",
			"password for the AMQP URL's user, kept out of the URL (prefer the _FILE form)"),
		caFile:   s.add("amqp-ca-file", "WALBOX_AMQP_CA_FILE", "", "PEM CA bundle to verify the broker's certificate (amqps; default: system roots)"),
		certFile: s.add("amqp-cert-file", "WALBOX_AMQP_CERT_FILE", "", "PEM client certificate for amqps"),
		keyFile:  s.add("amqp-key-file", "WALBOX_AMQP_KEY_FILE", "", "PEM key of the client certificate"),
		exchange: s.add("exchange", "WALBOX_EXCHANGE", "outbox", "topic exchange to publish to (declared durable)"),
		alternate: s.add("alternate-exchange", "WALBOX_ALTERNATE_EXCHANGE", "",
			"exchange that keeps messages no queue is bound for (default <exchange>.unroutable; \"none\": unroutable messages stall the stream until a queue is bound)"),
		park: s.add("park-exchange", "WALBOX_PARK_EXCHANGE", "", "exchange for rows that can never be delivered (default <exchange>.parked)"),
		maxSize: s.add("max-message-size", "WALBOX_MAX_MESSAGE_SIZE", "134217728",
			"largest message body in bytes; larger rows are parked (keep at or below the broker's max_message_size)"),
		window: s.add("window", "WALBOX_WINDOW", "1024", "most messages published and not yet confirmed"),
	}
}

// config returns the publisher's configuration, validated; appID names the connection and is
// every message's app-id.
func (b *brokerSettings) config(c *common, appID string) (publisher.Config, error) {
	var (
		pcfg publisher.Config
		err  error
	)
	if pcfg.URL, err = b.url.required(); err != nil {
		return pcfg, err
	}
	if b.password.value != "" {
		if pcfg.URL, err = withURLPassword(pcfg.URL, b.password.value); err != nil {
			return pcfg, badSetting(b.password, "%v", err)
		}
	}
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
	pcfg.AlternateExchange, pcfg.ParkExchange = b.alternate.value, b.park.value
	if err := pcfg.Validate(); err != nil {
		return pcfg, configError{redact.Text(err.Error(), c.secrets()...)}
	}
	return pcfg, nil
}

// mappings returns the outbox tables of the config file, if it names any.
func (c *common) mappings() []outbox.Mapping {
	if c.s.file != nil && len(c.s.file.tables) > 0 {
		return c.s.file.tables
	}
	return nil
}
