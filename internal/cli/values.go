package cli

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/walbox/walbox/internal/prune"
	"github.com/walbox/walbox/internal/relayd"
	"github.com/walbox/walbox/internal/replay"
	"github.com/walbox/walbox/outbox"
	"github.com/walbox/walbox/publisher"
	"github.com/walbox/walbox/replication"
	"github.com/walbox/walbox/shard"
	"github.com/walbox/walbox/slots"
	"github.com/walbox/walbox/streampub"
)

// values are the typed settings of one command. Each row of settingTable binds to one field here.
// Most are fields of the configuration the setting belongs to.
type values struct {
	relay   replication.Config  // run's relay; every command's database, slot and table
	pub     publisher.Config    // the broker's exchanges and limits
	stream  streampub.Config    // the stream mode's nodes, stream and retention
	daemon  relayd.Config       // run's lanes and HTTP address
	prune   prune.Job           // prune's age, batches and dry run
	recover slots.RecoverConfig // recover's choices
	reshard slots.ReshardConfig // reshard's wait
	replay  replay.Config       // replay's filter and rate

	config, dbPassword         string
	amqpURLs                   []string
	amqpPassword               string
	caFile, certFile, keyFile  string
	otlp, logLevel, logFormat  string
	relayRole, relayURL        string
	shards                     int // 0 when not set
	shard                      int // -1 when not set
	noSlot, json, requireRelay bool
	dryRun, retire             bool
	parkedAll, yes             bool
}

func newValues() *values { return &values{shard: -1} }

// decoder is a field type that reads its own setting. Its error says what is wrong with s; bind
// puts the setting's flag and environment variable in front.
type decoder interface {
	decode(s string) error
}

// decode sets the field p points to from the setting's value s.
func decode(p any, s string) error {
	switch p := p.(type) {
	case decoder:
		return p.decode(s)
	case *string:
		*p = s
	case *int:
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return fmt.Errorf("%q is not a positive whole number", s)
		}
		*p = n
	case *time.Duration:
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return fmt.Errorf("%q is not a positive duration like 5s", s)
		}
		*p = d
	case *bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("%q is not true or false", s)
		}
		*p = b
	case **bool:
		var b bool
		if err := decode(&b, s); err != nil {
			return err
		}
		*p = &b
	case *outbox.Table:
		t, err := outbox.ParseTable(s)
		if err != nil {
			return err
		}
		*p = t
	case *slots.FailoverSlot:
		f, err := slots.ParseFailoverSlot(s)
		if err != nil {
			return err
		}
		*p = f
	default:
		panic(fmt.Sprintf("a setting binds to a %T, which decode does not know", p))
	}
	return nil
}

// shardCount is a number of shards.
type shardCount int

func (n *shardCount) decode(s string) error {
	v, err := strconv.Atoi(s)
	if err != nil || v < 1 || v > shard.MaxShards {
		return fmt.Errorf("%q is not a number of shards from 1 to %d", s, shard.MaxShards)
	}
	*n = shardCount(v)
	return nil
}

// shardIndex is the number of a shard, from 0.
type shardIndex int

func (k *shardIndex) decode(s string) error {
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 {
		return fmt.Errorf("%q is not a shard number (0, 1, ...)", s)
	}
	*k = shardIndex(v)
	return nil
}

// byteCount is a positive number of bytes.
type byteCount int64

func (n *byteCount) decode(s string) error {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 1 {
		return fmt.Errorf("%q is not a positive number of bytes", s)
	}
	*n = byteCount(v)
	return nil
}

// pause is a duration that may be 0.
type pause time.Duration

func (d *pause) decode(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return fmt.Errorf("%q is not a duration like 100ms (0 for none)", s)
	}
	*d = pause(v)
	return nil
}

// age is --older-than: a Go duration (36h, 90m) or whole days (7d).
type age time.Duration

func (d *age) decode(s string) error {
	v, err := prune.ParseAge(s)
	if err != nil {
		return err
	}
	*d = age(v)
	return nil
}

// listenAddr is --listen: host:port, or "" for "off". An address that is well formed but taken
// is only logged when the relay starts: metrics are not the product.
type listenAddr string

func (a *listenAddr) decode(s string) error {
	if s == "off" || s == "" {
		*a = ""
		return nil
	}
	_, port, err := net.SplitHostPort(s)
	if err == nil {
		_, err = net.LookupPort("tcp", port)
	}
	if err != nil {
		return fmt.Errorf("%v; want host:port, such as 127.0.0.1:9187 (or \"off\")", err)
	}
	*a = listenAddr(s)
	return nil
}

// relayURL is status's --relay-url: an http or https address, or "off". It is refused before
// anything starts: otherwise it would only show up as the relay not answering.
type relayURL string

func (r *relayURL) decode(s string) error {
	*r = relayURL(s)
	if s == "off" || s == "" {
		return nil
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("not an http:// or https:// address of the relay's listener (or \"off\")")
	}
	return nil
}

// urlList is a comma-separated list of RabbitMQ URLs (--amqp-url).
type urlList []string

func (l *urlList) decode(s string) error {
	urls, err := publisher.ParseURLs(s)
	if err != nil {
		return err
	}
	*l = urls
	return nil
}

// streamURIs is a comma-separated list of RabbitMQ stream URIs (--stream-url).
type streamURIs []string

func (l *streamURIs) decode(s string) error {
	uris, err := streampub.ParseURIs(s)
	if err != nil {
		return err
	}
	*l = uris
	return nil
}

// instant is a point in time: RFC 3339, or a date (midnight UTC).
type instant time.Time

func (t *instant) decode(s string) error {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02"} {
		if v, err := time.Parse(layout, s); err == nil {
			if v.IsZero() { // the zero time is no bound at all
				return fmt.Errorf("%q is the zero time, which bounds nothing; give a later time", s)
			}
			*t = instant(v)
			return nil
		}
	}
	return fmt.Errorf("%q is not a time like 2026-11-28T09:00:00Z or a date like 2026-11-28", s)
}

// rate is a number of messages a second; 0 is no limit.
type rate float64

func (r *rate) decode(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return fmt.Errorf("%q is not a number of messages a second (0 for no limit)", s)
	}
	*r = rate(v)
	return nil
}
