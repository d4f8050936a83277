package cli

import (
	"bytes"
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/walbox/walbox/internal/redact"
)

// A list from the config file, with the password from a _FILE secret: every URL gets it, and the
// password is redacted wherever any of the URLs shows up.
func TestAMQPURLListWithPasswordFile(t *testing.T) {
	conf := writeFile(t, "walbox.yaml",
		"amqp-url: amqp://walbox@mq1:5672/, amqp://walbox@mq2:5673/,amqps://walbox@mq3:5671/prod\n")
	t.Setenv("WALBOX_CONFIG", conf)
	t.Setenv("WALBOX_AMQP_URL", "")
	t.Setenv("WALBOX_AMQP_PASSWORD_FILE", writeFile(t, "pw", "s3cr3t,pw@x\n"))
	t.Setenv("WALBOX_DATABASE_URL", "postgres://walbox@db/app")
	c := newCommon("run")
	resolveSettings(t, c)
	urls, err := c.amqpURLs()
	if err != nil {
		t.Fatal(err)
	}
	hosts := []string{"mq1:5672", "mq2:5673", "mq3:5671"}
	if len(urls) != len(hosts) {
		t.Fatalf("got %d URLs %q, want %d", len(urls), urls, len(hosts))
	}
	secrets := c.secrets()
	for i, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if pw, _ := u.User.Password(); u.Host != hosts[i] || u.User.Username() != "walbox" || pw != "s3cr3t,pw@x" {
			t.Errorf("URL %d: host %s user %s password %q; want %s walbox and the file's password", i+1, u.Host, u.User.Username(), pw, hosts[i])
		}
		line := "dial " + raw + " failed; password s3cr3t,pw@x"
		if got := redact.Text(line, secrets...); strings.Contains(got, "s3cr3t") {
			t.Errorf("URL %d: redacted %q still shows the password", i+1, got)
		}
	}
}

// A bad URL in the list stops run at start with one line naming its place, without its password.
func TestRunRejectsABadURLInTheList(t *testing.T) {
	t.Setenv("WALBOX_DATABASE_URL", "postgres://walbox@db/app")
	t.Setenv("WALBOX_AMQP_URL", "amqp://u:pw-one@mq1/,amqp://u:pw-two@mq2:port/")
	var out bytes.Buffer
	code := mainWithExit(context.Background(), []string{"run", "--listen", "off"}, &out, &out)
	if code != 2 {
		t.Fatalf("exit %d, want 2:\n%s", code, out.String())
	}
	if got := out.String(); !strings.Contains(got, "url 2 of 2") || strings.Contains(got, "pw-one") || strings.Contains(got, "pw-two") {
		t.Errorf("output %q: want the bad URL named by its place and no password", got)
	}
}

// resolveSettings registers c's settings, parses no arguments and resolves them.
func resolveSettings(t *testing.T, c *common) {
	t.Helper()
	fs := newFlagSet("test", "test", &bytes.Buffer{})
	c.s.register(fs)
	if err := parse(fs, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.s.resolve(); err != nil {
		t.Fatal(err)
	}
	if err := c.s.bind(c.v); err != nil {
		t.Fatal(err)
	}
}

// --lanes takes 1 to relayd.MaxLanes; anything else stops run at start, naming the setting.
func TestRunRejectsBadLanes(t *testing.T) {
	runRejects(t, "lanes", "0", "-1", "65", "three")
}

// runRejects checks that walbox run stops at start on each of values of flag, with exit 2 and one
// line naming the setting.
func runRejects(t *testing.T, flag string, values ...string) {
	t.Helper()
	t.Setenv("WALBOX_DATABASE_URL", "postgres://walbox@db/app")
	t.Setenv("WALBOX_AMQP_URL", "amqp://mq1/")
	for _, v := range values {
		var out bytes.Buffer
		code := mainWithExit(context.Background(), []string{"run", "--listen", "off", "--" + flag, v}, &out, &out)
		got := strings.TrimSpace(out.String())
		if code != 2 || !strings.Contains(got, "--"+flag) || strings.Contains(got, "\n") {
			t.Errorf("--%s %s: exit %d, output %q; want 2 and one line naming the setting", flag, v, code, got)
		}
	}
}

// A stream setting without --stream-url, or several lanes with it, would be ignored: the relay
// would publish to the exchange, or on one producer. run refuses them at start, naming the setting.
func TestRunRejectsStreamSettingsItWouldIgnore(t *testing.T) {
	t.Setenv("WALBOX_DATABASE_URL", "postgres://walbox@db/app")
	t.Setenv("WALBOX_AMQP_URL", "amqp://mq1/")
	cases := []struct {
		args []string
		env  string // a WALBOX_STREAM value, "" for none
		want string
	}{
		{[]string{"--stream", "orders"}, "", "--stream "},
		{nil, "orders", "--stream "},
		{[]string{"--stream-max-age", "168h"}, "", "--stream-max-age"},
		{[]string{"--stream-max-bytes", "1000"}, "", "--stream-max-bytes"},
		{[]string{"--stream-url", "rabbitmq-stream://mq1:5552/", "--lanes", "4"}, "", "--lanes (WALBOX_LANES): 4; a stream takes one producer"},
		{[]string{"--stream-url", "rabbitmq-stream://mq1:5552/", "--lanes", "100"}, "", "--lanes (WALBOX_LANES): 100; a stream takes one producer"},
	}
	for _, c := range cases {
		t.Setenv("WALBOX_STREAM", c.env)
		var out bytes.Buffer
		args := append([]string{"run", "--listen", "off"}, c.args...)
		code := mainWithExit(context.Background(), args, &out, &out)
		if code != 2 || !strings.Contains(out.String(), c.want) || strings.Count(out.String(), "\n") != 1 {
			t.Errorf("%v (WALBOX_STREAM=%q): exit %d, output %q; want 2 and one line naming %s", c.args, c.env, code, out.String(), c.want)
		}
	}
}

// doctor takes run's stream mode: with --stream-url it needs no --amqp-url, checks the stream's
// node, and keeps the URL's password out of its report.
func TestDoctorInStreamModeNeedsNoAMQPURL(t *testing.T) {
	t.Setenv("WALBOX_DATABASE_URL", "postgres://walbox@127.0.0.1:1/app")
	t.Setenv("WALBOX_AMQP_URL", "")
	t.Setenv("WALBOX_STREAM_URL", "rabbitmq-stream://walbox:s3cret@127.0.0.1:1/")
	var out bytes.Buffer
	code := mainWithExit(context.Background(), []string{"doctor"}, &out, &out)
	if code != 1 || !strings.Contains(out.String(), "RabbitMQ stream at 127.0.0.1:1") || strings.Contains(out.String(), "s3cret") {
		t.Errorf("doctor: exit %d, output %q; want 1 (checks failed), the stream's node checked, no password", code, out.String())
	}
}

// --canary-interval takes 0 (off) or canary.MinInterval and more. Shorter, two intervals pass
// before any canary can come back, and /readyz would never be ready. run refuses it at start.
func TestRunRejectsBadCanaryIntervals(t *testing.T) {
	runRejects(t, "canary-interval", "1ms", "1ns", "99ms", "-1s", "soon")
}
