// Package redact removes passwords from text before it reaches a log, an error message or a
// terminal. See docs/architecture.md for the packages that use it.
package redact

import (
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

const mask = "xxxxx"

var (
	urlUserinfo = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*:)[^@\s]*@`)
	keyword     = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&'"]+)`)
)

// Secrets returns the passwords found in connection strings, for Text to remove wherever they
// appear. It reads URLs with userinfo or a password query parameter, and key=value strings. A
// comma-separated list of URLs (see SplitList) counts as each of its URLs.
func Secrets(conns ...string) []string {
	var out []string
	for _, c := range splitAll(conns) {
		if u, err := url.Parse(c); err == nil && u.Scheme != "" {
			if p, ok := u.User.Password(); ok && p != "" {
				out = append(out, p, url.QueryEscape(p), url.PathEscape(p))
			}
			for k, vs := range u.Query() {
				if strings.EqualFold(k, "password") || strings.EqualFold(k, "sslpassword") {
					out = append(out, vs...)
				}
			}
		}
		if strings.Contains(c, "://") {
			// Also when the URL does not parse, or parses with the password cut short.
			out = append(out, PasswordForms(c)...)
		}
		for _, m := range keyword.FindAllStringSubmatch(c, -1) {
			out = append(out, strings.Trim(m[2], "'"))
		}
	}
	return out
}

func splitAll(conns []string) []string {
	var out []string
	for _, c := range conns {
		out = append(out, SplitList(c)...)
	}
	return out
}

// Text masks URL userinfo passwords, password=... keywords and parameters, and every given secret.
func Text(s string, secrets ...string) string {
	s = urlUserinfo.ReplaceAllString(s, "${1}"+mask+"@")
	s = keyword.ReplaceAllString(s, "${1}"+mask)
	for _, sec := range secrets {
		if len(sec) >= 3 {
			s = strings.ReplaceAll(s, sec, mask)
		}
	}
	return s
}

// PasswordForms returns the forms in which the password of rawURL may appear in an error text,
// longest first. It does not rely on URL parsing: the URL at hand may be malformed. And an
// unescaped password may itself contain '@', '/' or '#'. So every '@' is taken in turn as the end
// of the userinfo. The pieces between reserved characters count too; redacting too much is
// harmless.
func PasswordForms(rawURL string) []string {
	_, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		rest = rawURL
	}
	var forms []string
	add := func(p string) {
		if p != "" && !slices.Contains(forms, p) {
			forms = append(forms, p)
		}
	}
	for i := range len(rest) {
		if rest[i] != '@' {
			continue
		}
		_, pass, ok := strings.Cut(rest[:i], ":")
		if !ok {
			continue
		}
		add(pass)
		if dec, err := url.PathUnescape(pass); err == nil {
			add(dec)
		}
		add(url.QueryEscape(pass))
		q := strconv.Quote(pass)
		add(q[1 : len(q)-1])
		// A parser may split an unescaped password at a reserved character and quote a piece.
		for _, piece := range strings.FieldsFunc(pass, isReserved) {
			if len(piece) >= 3 {
				add(piece)
			}
		}
	}
	slices.SortFunc(forms, func(a, b string) int { return len(b) - len(a) })
	return forms
}

func isReserved(r rune) bool { return strings.ContainsRune(":/?#[]@!$&'()*+,;=% ", r) }

// listStart finds the commas that begin another URL of a list: commas and spaces, then a scheme.
var listStart = regexp.MustCompile(`,[\s,]*[a-zA-Z][a-zA-Z0-9+.-]*://`)

// SplitList splits a comma-separated list of URLs. It splits only at a comma before another URL's
// scheme (amqp://…). So a comma inside a URL, in a password say, stays where it is.
// Spaces around each URL, empty elements and trailing commas are dropped. Text without "://"
// comes back whole.
func SplitList(list string) []string {
	if !strings.Contains(list, "://") {
		return []string{list}
	}
	var out []string
	list = strings.TrimRight(list, ", \t\n")
	for {
		loc := listStart.FindStringIndex(list)
		if loc == nil {
			return append(out, strings.TrimSpace(list))
		}
		out = append(out, strings.TrimSpace(list[:loc[0]]))
		list = strings.TrimLeft(list[loc[0]:], ", \t\n")
	}
}
