package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/walbox/walbox/outbox"
)

// badValue is a value the field p does not take: not a number, duration, switch, URL, address
// or table name.
func badValue(p any) string {
	if _, ok := p.(*outbox.Table); ok {
		return "a.b.c"
	}
	return "not a value"
}

// Every setting that binds to a field other than a string refuses a bad value, from its flag and
// from its environment variable, before anything starts: exit 2 and one line naming the flag and
// the variable (the other settings given, their servers unreachable).
func TestABadValueNamesItsSetting(t *testing.T) {
	for _, c := range commands {
		for _, sp := range specsOf(c.name) {
			if sp.bind == nil {
				continue
			}
			field := sp.bind(newValues())
			if _, isString := field.(*string); isString {
				continue
			}
			bad := badValue(field)
			sources := map[string]func(t *testing.T) []string{
				"flag": func(*testing.T) []string { return []string{"--" + sp.flag + "=" + bad} },
			}
			if sp.env != "" {
				sources["environment"] = func(t *testing.T) []string { t.Setenv(sp.env, bad); return nil }
			}
			for src, set := range sources {
				t.Run(c.name+"/"+sp.flag+"/"+src, func(t *testing.T) {
					clearEnv(t)
					t.Setenv("WALBOX_DATABASE_URL", "postgres://u@127.0.0.1:1/db?connect_timeout=1")
					t.Setenv("WALBOX_AMQP_URL", "amqp://127.0.0.1:1")
					t.Setenv("WALBOX_PRUNE_OLDER_THAN", "1h")
					args := append([]string{c.name}, set(t)...)
					if c.name == "run" && sp.flag != "listen" {
						args = append(args, "--listen=off")
					}
					if c.name == "reshard" && sp.flag != "shards" {
						args = append(args, "--shards=2")
					}
					var out bytes.Buffer
					code := mainWithExit(context.Background(), args, &out, &out)
					want := "walbox " + c.name + ": --" + sp.flag
					if sp.env != "" {
						want += " (" + sp.env + ")"
					}
					if code != 2 || strings.Count(out.String(), "\n") != 1 || !strings.HasPrefix(out.String(), want+": ") {
						t.Errorf("walbox %v exited %d:\n%s\nwant 2 and one line starting %q", args, code, out.String(), want+": ")
					}
				})
			}
		}
	}
}

// run installs its signal handler before it reads anything from a server: a SIGTERM while it
// waits for the database to read the shards' layout stops it like any other stop (exit 0).
func TestRunStopsOnASignalWhileItReadsTheShards(t *testing.T) {
	if os.Getenv("WALBOX_TEST_RUN_MAIN") == "1" {
		os.Exit(mainWithExit(context.Background(), []string{"run", "--listen=off", "--shard=0", "--wait-for-servers"},
			os.Stdout, os.Stderr))
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRunStopsOnASignalWhileItReadsTheShards$")
	cmd.Env = append(os.Environ(), "WALBOX_TEST_RUN_MAIN=1", "WALBOX_LOG_FORMAT=text", "WALBOX_CONFIG=",
		"WALBOX_DATABASE_URL=postgres://u@127.0.0.1:1/db?connect_timeout=1", "WALBOX_AMQP_URL=amqp://127.0.0.1:1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stderr)
	var seen []string
	for lines.Scan() {
		seen = append(seen, lines.Text())
		if strings.Contains(lines.Text(), "cannot read the publications yet; retrying") {
			break
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(stderr)
	err = cmd.Wait()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatalf("walbox run ended with %v on SIGTERM while it read the shards, want exit 0; stderr:\n%s\n%s",
			err, strings.Join(seen, "\n"), rest)
	}
}

// --database-password goes into --database-url and --replication-url alike, for every command
// that takes both. A malformed --replication-url stops the command at start, named, its password
// hidden.
func TestDatabasePasswordGoesIntoBothURLs(t *testing.T) {
	for _, cmd := range []string{"migrate", "run", "status", "doctor", "recover", "reshard"} {
		t.Run(cmd, func(t *testing.T) {
			clearEnv(t)
			t.Setenv("WALBOX_DATABASE_URL", "postgres://walbox@primary/app")
			t.Setenv("WALBOX_REPLICATION_URL", "postgres://walbox@standby/app")
			t.Setenv("WALBOX_DATABASE_PASSWORD", "s3cret")
			t.Setenv("WALBOX_AMQP_URL", "amqp://mq/")
			t.Setenv("WALBOX_SHARDS", "2")
			c := newCommon(cmd)
			if err := c.parse(newFlagSet(cmd, "test", io.Discard), nil); err != nil {
				t.Fatal(err)
			}
			for _, u := range []string{c.v.relay.DatabaseURL, c.v.relay.ReplicationURL} {
				if !strings.Contains(u, "walbox:s3cret@") {
					t.Errorf("URL %q: want the password in it", u)
				}
			}
			t.Setenv("WALBOX_REPLICATION_URL", "postgres://walbox:s3cret@standby:port/app")
			t.Setenv("WALBOX_DATABASE_PASSWORD", "")
			var out bytes.Buffer
			code := mainWithExit(context.Background(), []string{cmd}, &out, &out)
			want := "walbox " + cmd + ": --replication-url (WALBOX_REPLICATION_URL): "
			if code != 2 || !strings.HasPrefix(out.String(), want) || strings.Contains(out.String(), "s3cret") {
				t.Errorf("a malformed replication URL: exit %d, %q; want 2, %q and no password", code, out.String(), want)
			}
		})
	}
}

// A setting the command leaves unused in its mode is not decoded. A value it would refuse does
// not stop the command then. The AMQP settings are unused into a stream and with recover
// --dry-run; the window is unused where nothing is published. A shared environment keeps working.
func TestAnUnusedSettingIsNotDecoded(t *testing.T) {
	stream := "--stream-url=rabbitmq-stream://127.0.0.1:1/"
	for _, args := range [][]string{
		{"run", stream, "--listen=off"},
		{"doctor", stream},
		{"recover", stream},
		{"recover", "--dry-run"},
	} {
		for _, env := range []string{"WALBOX_AMQP_URL=bogus", "WALBOX_MAX_MESSAGE_SIZE=0", "WALBOX_WINDOW=0"} {
			name, value, _ := strings.Cut(env, "=")
			if args[0] == "run" && name == "WALBOX_WINDOW" {
				continue // run into a stream keeps its window
			}
			t.Run(strings.Join(args, " ")+"/"+env, func(t *testing.T) {
				clearEnv(t)
				t.Setenv("WALBOX_DATABASE_URL", "postgres://u@127.0.0.1:1/db?connect_timeout=1")
				t.Setenv(name, value)
				var out bytes.Buffer
				code := mainWithExit(context.Background(), args, &out, &out)
				if code != 1 || strings.Contains(out.String(), name) {
					t.Errorf("walbox %v with %s exited %d:\n%s\nwant 1 (the servers unreachable), %s ignored", args, env, code, out.String(), name)
				}
			})
		}
	}
}

// A bad --dry-run is reported as itself, not as the --amqp-url it would make optional.
func TestABadSwitchIsReportedBeforeWhatItExcuses(t *testing.T) {
	clearEnv(t)
	t.Setenv("WALBOX_DATABASE_URL", "postgres://u@127.0.0.1:1/db?connect_timeout=1")
	var out bytes.Buffer
	code := mainWithExit(context.Background(), []string{"recover", "--dry-run=x"}, &out, &out)
	if want := "walbox recover: --dry-run: "; code != 2 || !strings.HasPrefix(out.String(), want) {
		t.Errorf("walbox recover --dry-run=x exited %d:\n%s\nwant 2 and a line starting %q", code, out.String(), want)
	}
}

// A bad slot name stops run before it reads a server, even one it waits for: exit 2 and the
// name's one line, with no shard lookup or warning first. An empty one is the default.
func TestRunRefusesABadSlotBeforeItReadsAServer(t *testing.T) {
	t.Run("empty", func(t *testing.T) {
		clearEnv(t)
		t.Setenv("WALBOX_DATABASE_URL", "postgres://u@127.0.0.1:1/db?connect_timeout=1")
		var out bytes.Buffer
		args := []string{"run", "--amqp-url=amqp://127.0.0.1:1", "--listen=off", "--slot="}
		if code := mainWithExit(context.Background(), args, &out, &out); code != 1 {
			t.Errorf("walbox %v exited %d:\n%s\nwant 1: the default slot, the database unreachable", args, code, out.String())
		}
	})
	for _, args := range [][]string{
		{"run", "--amqp-url=amqp://127.0.0.1:1", "--shard=0", "--wait-for-servers"},
		{"run", "--stream-url=rabbitmq-stream://127.0.0.1:1/"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			clearEnv(t)
			t.Setenv("WALBOX_DATABASE_URL", "postgres://u@127.0.0.1:1/db?connect_timeout=1")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var out bytes.Buffer
			code := mainWithExit(ctx, append(args, "--listen=off", "--slot=Bad-Slot"), &out, &out)
			want := "walbox run: slot \"Bad-Slot\": "
			if code != 2 || strings.Count(out.String(), "\n") != 1 || !strings.HasPrefix(out.String(), want) {
				t.Errorf("walbox %v exited %d:\n%s\nwant 2 and one line starting %q", args, code, out.String(), want)
			}
		})
	}
}

// --canary-interval 0 turns the canary off, as its help says; the fault tests' relays run so.
func TestCanaryIntervalZeroIsOff(t *testing.T) {
	clearEnv(t)
	c := newCommon("run")
	fs := newFlagSet("run", "", &bytes.Buffer{})
	if err := c.parse(fs, []string{"--database-url=postgres://u@h/db", "--amqp-url=amqp://h/", "--canary-interval=0"}); err != nil {
		t.Fatalf("--canary-interval=0: %v", err)
	}
	if c.v.daemon.Canary != 0 {
		t.Errorf("--canary-interval=0 gives %v, want 0", c.v.daemon.Canary)
	}
}
