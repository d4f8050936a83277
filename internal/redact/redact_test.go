package redact_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/walbox/walbox/internal/redact"
)

func TestText(t *testing.T) {
	tests := []struct {
		name, in string
	}{
		{"postgres url", "dial postgres://walbox:s3cr3t-pw@db:5432/app failed"},
		{"amqp url", "dial amqp://user:s3cr3t-pw@mq:5672/ refused"},
		{"keyword form", "connect host=db user=walbox password=s3cr3t-pw dbname=app"},
		{"quoted keyword", "connect host=db password='s3cr3t-pw' dbname=app"},
		{"query parameter", "postgres://db/app?sslmode=disable&password=s3cr3t-pw"},
		{"bare secret elsewhere", `auth failed for "s3cr3t-pw"`},
	}
	secrets := redact.Secrets("postgres://walbox:s3cr3t-pw@db/app")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := redact.Text(tt.in, secrets...)
			if strings.Contains(got, "s3cr3t-pw") {
				t.Errorf("Text(%q) = %q: password still there", tt.in, got)
			}
		})
	}
}

func TestSecrets(t *testing.T) {
	got := redact.Secrets("host=db password='a b c'", "amqp://u:p%40ss@h/", "postgres://h/db?password=qwerty")
	want := map[string]bool{"a b c": true, "p@ss": true, "qwerty": true}
	for w := range want {
		found := false
		for _, g := range got {
			found = found || g == w
		}
		if !found {
			t.Errorf("Secrets missed %q (got %q)", w, got)
		}
	}
}

func TestTextKeepsOrdinaryText(t *testing.T) {
	in := "streaming slot=walbox lsn=0/16B3748"
	if got := redact.Text(in); got != in {
		t.Errorf("Text(%q) = %q, want it unchanged", in, got)
	}
}

// A password with an unescaped '@' or '/' makes parsers disagree on where it ends, and a
// library's error may quote any piece of it (pgx once reported "lookup s3cr3t@pw: no such host"
// and "database=42@db:5432/app" for this one).
func TestSecretsOfAMalformedURL(t *testing.T) {
	secrets := redact.Secrets("postgres://walbox:Zx9-@s3cr3t@pw/42@db:5432/app")
	for _, text := range []string{
		"hostname resolving error: lookup s3cr3t@pw: no such host",
		"failed to connect to `user=walbox database=42@db:5432/app`: Zx9-@s3cr3t@pw",
	} {
		if got := redact.Text(text, secrets...); strings.Contains(got, "s3cr3t") {
			t.Errorf("Text(%q) = %q: part of the password still there", text, got)
		}
	}
}

func TestSplitList(t *testing.T) {
	tests := []struct {
		name, in string
		want     []string
	}{
		{"one url", "amqp://u:p@h1:5672/", []string{"amqp://u:p@h1:5672/"}},
		{"three urls", "amqp://u:p@h1/,amqps://u:q@h2/, amqp://h3/vh",
			[]string{"amqp://u:p@h1/", "amqps://u:q@h2/", "amqp://h3/vh"}},
		{"a comma in a password stays", "amqp://u:a,b@h1/,amqp://u:c,d@h2/", []string{"amqp://u:a,b@h1/", "amqp://u:c,d@h2/"}},
		{"a keyword string is one", "host=db password=x,y", []string{"host=db password=x,y"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := redact.SplitList(tt.in); !slices.Equal(got, tt.want) {
				t.Errorf("SplitList(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// Every URL of a list has its password found, and nothing of the list's syntax is taken for one.
func TestSecretsOfAList(t *testing.T) {
	got := redact.Secrets("amqp://u:first-pw@h1:5672/,amqp://u:second-pw@h2:5672/, amqps://u:third,pw@h3/")
	for _, w := range []string{"first-pw", "second-pw", "third,pw"} {
		if !slices.Contains(got, w) {
			t.Errorf("Secrets missed %q (got %q)", w, got)
		}
	}
	for _, g := range got {
		if strings.Contains(g, "amqp") || strings.Contains(g, "h2") {
			t.Errorf("Secrets took %q for a password", g)
		}
	}
}
