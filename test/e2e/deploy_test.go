package e2e_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// walboxMetrics are the metric names `walbox run` exports (team notes, Metrics: names are final),
// with whether each is a histogram (and so also appears with _bucket, _sum and _count).
var walboxMetrics = map[string]bool{
	"walbox_messages_published_total":       false,
	"walbox_messages_confirmed_total":       false,
	"walbox_messages_returned_total":        false,
	"walbox_messages_nacked_total":          false,
	"walbox_messages_parked_total":          false,
	"walbox_messages_retried_total":         false,
	"walbox_confirm_latency_seconds":        true,
	"walbox_commit_to_confirm_seconds":      true,
	"walbox_commit_to_publish_seconds":      true,
	"walbox_commit_to_read_seconds":         true,
	"walbox_inflight_messages":              false,
	"walbox_oldest_unconfirmed_age_seconds": false,
	"walbox_confirmed_lsn_bytes":            false,
	"walbox_received_lsn_bytes":             false,
	"walbox_server_wal_lsn_bytes":           false,
	"walbox_replication_lag_bytes":          false,
	"walbox_slot_retained_wal_bytes":        false,
	"walbox_slot_wal_status":                false,
	"walbox_reconnects_total":               false,
	"walbox_active":                         false,
	"walbox_last_confirm_timestamp_seconds": false,
	"walbox_broker_blocked":                 false,
	"walbox_queue_unavailable":              false,
	"walbox_park_waiting":                   false,
	"walbox_canary_age_seconds":             false,
	"walbox_canary_interval_seconds":        false,
	"walbox_canary_latency_seconds":         true,
	// Exported by consumers that use consumer/consumermetrics, not by walbox run.
	"walbox_consumer_lag_seconds":       true,
	"walbox_consumer_handled_total":     false,
	"walbox_consumer_failed_total":      false,
	"walbox_scheduled_messages":         false,
	"walbox_scheduled_lateness_seconds": true,
}

var metricName = regexp.MustCompile(`\bwalbox_[a-z0-9_]+`)

// unknownMetrics returns the walbox_ names in expr that walbox does not export.
func unknownMetrics(expr string) []string {
	var out []string
	for _, name := range metricName.FindAllString(expr, -1) {
		if _, ok := walboxMetrics[name]; ok {
			continue
		}
		base := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			base = strings.TrimSuffix(base, suffix)
		}
		if walboxMetrics[base] {
			continue
		}
		out = append(out, name)
	}
	return out
}

func deployFile(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

type grafanaPanel struct {
	ID      int            `json:"id"`
	Type    string         `json:"type"`
	Title   string         `json:"title"`
	GridPos map[string]int `json:"gridPos"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"` // of a collapsed row
}

// dashboardPanels returns every panel of the dashboard, those inside rows included.
func dashboardPanels(t *testing.T) []grafanaPanel {
	t.Helper()
	var dash struct {
		Title         string         `json:"title"`
		UID           string         `json:"uid"`
		SchemaVersion int            `json:"schemaVersion"`
		Panels        []grafanaPanel `json:"panels"`
	}
	if err := json.Unmarshal(deployFile(t, "grafana-dashboard.json"), &dash); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	if dash.Title == "" || dash.UID == "" || dash.SchemaVersion == 0 {
		t.Fatalf("dashboard title %q, uid %q, schemaVersion %d: want all set", dash.Title, dash.UID, dash.SchemaVersion)
	}
	var all []grafanaPanel
	for _, p := range dash.Panels {
		all = append(all, p)
		all = append(all, p.Panels...)
	}
	return all
}

func TestDeployDashboardUsesOnlyWalboxMetrics(t *testing.T) {
	used := map[string]bool{}
	ids := map[int]bool{}
	for _, p := range dashboardPanels(t) {
		if ids[p.ID] {
			t.Errorf("panel %q: id %d used twice", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if p.Title == "" || p.GridPos["w"] == 0 || p.GridPos["h"] == 0 || len(p.Targets) == 0 {
			t.Errorf("panel %d %q: want a title, a size and at least one query", p.ID, p.Title)
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" || tg.RefID == "" {
				t.Errorf("panel %q: a query without expr or refId", p.Title)
			}
			if bad := unknownMetrics(tg.Expr); len(bad) > 0 {
				t.Errorf("panel %q uses %v, which walbox does not export: %s", p.Title, bad, tg.Expr)
			}
			for _, name := range metricName.FindAllString(tg.Expr, -1) {
				used[name] = true
			}
		}
	}
	// The dashboard shows what an operator asks first.
	for _, want := range []string{"walbox_messages_published_total", "walbox_messages_confirmed_total",
		"walbox_commit_to_confirm_seconds_bucket", "walbox_replication_lag_bytes", "walbox_slot_retained_wal_bytes",
		"walbox_inflight_messages", "walbox_messages_parked_total", "walbox_reconnects_total", "walbox_active"} {
		if !used[want] {
			t.Errorf("no panel shows %s", want)
		}
	}
}

type alertRule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func TestDeployAlertRules(t *testing.T) {
	var file struct {
		Groups []struct {
			Name  string      `yaml:"name"`
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(deployFile(t, "prometheus-alerts.yml"))))
	dec.KnownFields(true)
	if err := dec.Decode(&file); err != nil {
		t.Fatalf("prometheus-alerts.yml: %v", err)
	}
	var names []string
	for _, g := range file.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("group %q: want a name and rules", g.Name)
		}
		for _, r := range g.Rules {
			names = append(names, r.Alert)
			switch {
			case r.Alert == "" || strings.TrimSpace(r.Expr) == "":
				t.Errorf("rule %q: want alert and expr", r.Alert)
			case r.Labels["severity"] != "warning" && r.Labels["severity"] != "critical":
				t.Errorf("rule %s: severity %q, want warning or critical", r.Alert, r.Labels["severity"])
			case r.Annotations["summary"] == "" || r.Annotations["description"] == "":
				t.Errorf("rule %s: want summary and description annotations", r.Alert)
			}
			if bad := unknownMetrics(r.Expr); len(bad) > 0 {
				t.Errorf("rule %s uses %v, which walbox does not export", r.Alert, bad)
			}
		}
	}
	for _, want := range []string{"WalboxReplicationLagGrowing", "WalboxRetainedWALHigh", "WalboxNoConfirms",
		"WalboxMessagesParked", "WalboxSlotLost", "WalboxSlotUnreserved", "WalboxDown", "WalboxAbsent", "WalboxNoActiveInstance", "WalboxBrokerBlocked", "WalboxCanaryStale"} {
		if !slices.Contains(names, want) {
			t.Errorf("no alert %s", want)
		}
	}
}

// promtool checks the rules, runs their unit tests (deploy/prometheus-alerts.test.yml), and parses
// every dashboard query as a recording rule.
func TestDeployPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not found (Debian: apt-get install prometheus); the shape checks above still ran")
	}
	dir := filepath.Join("..", "..", "deploy")
	for _, args := range [][]string{{"check", "rules", "prometheus-alerts.yml"}, {"test", "rules", "prometheus-alerts.test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// Grafana's variables become what they stand for, so that promtool can parse the queries.
	vars := strings.NewReplacer("$__rate_interval", "5m", "$job", ".*", "$instance", ".*")
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	n := 0
	for _, p := range dashboardPanels(t) {
		for _, tg := range p.Targets {
			n++
			expr, _ := json.Marshal(vars.Replace(tg.Expr)) // a JSON string is a YAML string
			fmt.Fprintf(&rules, "      - record: dashboard:query%d\n        expr: %s\n", n, expr)
		}
	}
	path := filepath.Join(t.TempDir(), "dashboard-queries.yml")
	if err := os.WriteFile(path, []byte(rules.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("dashboard queries do not parse: %v\n%s", err, out)
	}
}
