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
	return &streamSettings{url: s.get("stream-url"), name: s.get("stream"), maxAge: s.get("stream-max-age"),
		maxBytes: s.get("stream-max-bytes")}
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
