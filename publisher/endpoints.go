package publisher

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/walbox/walbox/internal/redact"
	"github.com/walbox/walbox/wire"
)

// ParseURLs splits a comma-separated list of broker URLs, the nodes of one cluster say. It checks
// each URL. It splits only at a comma before another URL's scheme (amqp:// or amqps://). So a comma
// inside a URL stays where it is. Errors name the URL by its place in the list and never contain a
// password.
func ParseURLs(list string) ([]string, error) {
	urls := redact.SplitList(list)
	for i, u := range urls {
		if _, err := parseURL(u); err != nil {
			if len(urls) == 1 {
				return nil, err
			}
			return nil, fmt.Errorf("url %d of %d: %w", i+1, len(urls), err)
		}
	}
	return urls, nil
}

// Endpoints dials one broker of several, the nodes of one cluster. They all serve the same
// exchanges and queues. Dial tries them in turn and returns the first session that opens. Each Dial
// starts at the URL after the one the previous session used. So once a session is lost the next one
// goes to another node; the lost one is tried last. A Dial in which every URL failed starts at the
// same URL next time. The caller backs off between rounds, not between URLs.
//
// Endpoints is safe for concurrent use.
type Endpoints struct {
	cfgs []Config // one per URL, validated

	mu        sync.Mutex
	next      int      // the URL the next Dial tries first
	current   *Session // the last session dialed; nil before the first
	onBlocked func(host string, blocked bool, reason string)
	onQueue   func(QueueState)
}

// NewEndpoints returns Endpoints for cfg with each of urls in turn as its URL. It validates
// every resulting Config (cfg.URL is ignored).
func NewEndpoints(cfg Config, urls []string) (*Endpoints, error) {
	if len(urls) == 0 {
		return nil, errors.New("url: empty")
	}
	e := &Endpoints{cfgs: make([]Config, len(urls))}
	for i, u := range urls {
		c := cfg.WithDefaults()
		c.URL, c.cluster = u, len(urls) > 1
		if err := c.Validate(); err != nil {
			if len(urls) > 1 {
				err = fmt.Errorf("url %d of %d: %w", i+1, len(urls), err)
			}
			return nil, err
		}
		e.cfgs[i] = c
	}
	return e, nil
}

// Hosts returns the host:port of every URL, in list order; they carry no credentials.
func (e *Endpoints) Hosts() []string {
	hosts := make([]string, len(e.cfgs))
	for i, c := range e.cfgs {
		hosts[i] = hostOf(c.URL)
	}
	return hosts
}

// Configs returns the Config of every URL, in list order.
func (e *Endpoints) Configs() []Config { return append([]Config(nil), e.cfgs...) }

// Dial opens a session on the first URL that answers, starting after the URL of the previous
// session. Each attempt is bounded by Config.DialTimeout. When all fail, the error names each
// host with its failure. ctx ending stops the round at once.
func (e *Endpoints) Dial(ctx context.Context) (*Session, error) {
	e.mu.Lock()
	start, onBlocked, onQueue := e.next, e.onBlocked, e.onQueue
	e.mu.Unlock()
	var errs []error
	for i := range e.cfgs {
		idx := (start + i) % len(e.cfgs)
		cfg := e.cfgs[idx]
		if onBlocked != nil {
			h := hostOf(cfg.URL)
			cfg.OnBlocked = func(blocked bool, reason string) { onBlocked(h, blocked, reason) }
		}
		if onQueue != nil {
			cfg.OnQueue = onQueue
		}
		s, err := Dial(ctx, cfg)
		if err == nil {
			e.mu.Lock()
			e.next, e.current = (idx+1)%len(e.cfgs), s
			e.mu.Unlock()
			return s, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		errs = append(errs, err)
	}
	if len(errs) == 1 {
		return nil, errs[0]
	}
	msgs, reached := make([]string, len(errs)), false
	for i, err := range errs {
		msgs[i] = err.Error()
		reached = reached || errors.Is(err, wire.ErrServerAnswered)
	}
	if reached {
		return nil, answered{fmt.Errorf("no broker of %d opened a session: %s", len(errs), strings.Join(msgs, "; "))}
	}
	return nil, fmt.Errorf("no broker of %d answered: %s", len(errs), strings.Join(msgs, "; "))
}

// WatchBlocked has every session dialed from now on tell fn when the broker blocks or unblocks it.
// It tells the broker's host:port too (see Config.OnBlocked). It replaces the OnBlocked of the
// configuration.
func (e *Endpoints) WatchBlocked(fn func(host string, blocked bool, reason string)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.onBlocked = fn
}

// WatchQueues has every session dialed from now on tell fn about its park and alternate queues
// (see Config.OnQueue). It replaces the OnQueue of the configuration.
func (e *Endpoints) WatchQueues(fn func(QueueState)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.onQueue = fn
}

// Connected returns the host:port of the live session's broker, or "" when there is none.
func (e *Endpoints) Connected() string {
	e.mu.Lock()
	s := e.current
	e.mu.Unlock()
	if s == nil || s.Err() != nil {
		return ""
	}
	return s.Endpoint()
}

// hostOf returns host:port of an AMQP URL, or a placeholder when it does not parse.
func hostOf(rawURL string) string {
	uri, err := parseURL(rawURL)
	if err != nil {
		return "(unparsable url)"
	}
	return host(uri)
}
