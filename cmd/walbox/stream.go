package main

import (
	"strconv"

	"github.com/walbox/walbox/streampub"
)

// streamSettings are the settings of `walbox run` that publish into a RabbitMQ stream instead of
// to the exchange.
type streamSettings struct {
	url, name, maxAge, maxBytes *setting
}

func addStreamSettings(s *settings) *streamSettings {
	return &streamSettings{
		url: s.add("stream-url", "WALBOX_STREAM_URL", "", "RabbitMQ stream URL, rabbitmq-stream://; several, comma-separated, "+
			"for the nodes of a cluster. With it walbox publishes into --stream, exactly once, instead of to the exchange"),
		name:     s.add("stream", "WALBOX_STREAM", "outbox", "the stream to publish into (declared if missing)"),
		maxAge:   s.add("stream-max-age", "WALBOX_STREAM_MAX_AGE", "", "retention of a stream walbox declares: drop messages older than this (e.g. 168h; empty: no limit)"),
		maxBytes: s.add("stream-max-bytes", "WALBOX_STREAM_MAX_BYTES", "", "retention of a stream walbox declares: keep at most this many bytes (empty: no limit)"),
	}
}

// config returns the stream publisher's configuration, or nil when --stream-url is not set.
func (s *streamSettings) config() (*streampub.Config, error) {
	if s.url.value == "" {
		return nil, nil
	}
	uris, err := streampub.ParseURIs(s.url.value)
	if err != nil {
		return nil, badSetting(s.url, "%v", err)
	}
	cfg := &streampub.Config{URIs: uris, Stream: s.name.value}
	if cfg.Stream == "" {
		return nil, badSetting(s.name, "required with --stream-url")
	}
	if s.maxAge.value != "" {
		if cfg.MaxAge, err = s.maxAge.duration(); err != nil {
			return nil, err
		}
	}
	if s.maxBytes.value != "" {
		n, err := strconv.ParseInt(s.maxBytes.value, 10, 64)
		if err != nil || n < 1 {
			return nil, badSetting(s.maxBytes, "%q is not a positive number of bytes", s.maxBytes.value)
		}
		cfg.MaxBytes = n
	}
	return cfg, nil
}
