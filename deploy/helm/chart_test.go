package chart_test

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

const chartDir = "walbox"

var update = flag.Bool("update", false, "rewrite testdata/e2e-env.json from the chart")

// render runs helm template on the chart in dir with the values files given, and decodes the
// result strictly.
func render(t *testing.T, dir string, valuesFiles ...string) (*objects, error) {
	t.Helper()
	args := []string{"template", "relay", dir, "--namespace", "outbox"}
	for _, f := range valuesFiles {
		args = append(args, "--values", f)
	}
	out, err := runHelm(t, args...)
	if err != nil {
		return nil, err
	}
	return decodeAll(out)
}

func mustRender(t *testing.T, valuesFiles ...string) *objects {
	t.Helper()
	o, err := render(t, chartDir, valuesFiles...)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestLint(t *testing.T) {
	for _, values := range [][]string{nil, {"testdata/shards-cluster.yaml"}} {
		args := []string{"lint", "--strict", chartDir}
		for _, f := range values {
			args = append(args, "--values", f)
		}
		out, err := runHelm(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		if s := string(out); strings.Contains(s, "[WARNING]") || strings.Contains(s, "[ERROR]") ||
			!strings.Contains(s, "1 chart(s) linted, 0 chart(s) failed") {
			t.Errorf("helm lint %v:\n%s", values, s)
		}
	}
}

func TestDefaultValues(t *testing.T) {
	o := mustRender(t)
	counts(t, o, map[string]int{"Deployment": 1, "PodDisruptionBudget": 1, "Service": 1, "ServiceAccount": 1, "Job": 1})
	d := o.Deployments[0]
	if d.Name != "relay-walbox" {
		t.Errorf("deployment name %q, want relay-walbox", d.Name)
	}
	if got := *d.Spec.Replicas; got != 2 {
		t.Errorf("replicas %d, want 2: one streams, one waits as a standby", got)
	}
	c := relayContainer(t, d)
	if !slices.Equal(c.Args, []string{"run"}) {
		t.Errorf("args %q, want [run]", c.Args)
	}
	env := envOf(c)
	for name, want := range map[string]string{
		"WALBOX_SLOT": "walbox", "WALBOX_PUBLICATION": "walbox", "WALBOX_TABLE": "public.outbox",
		"WALBOX_CREATE_SLOT": "false", "WALBOX_LISTEN": ":9187", "WALBOX_LOG_FORMAT": "json",
	} {
		if env[name] != want {
			t.Errorf("%s = %q, want %q", name, env[name], want)
		}
	}
	// No secret is named: no file settings, no secret volume.
	for name := range env {
		if strings.HasSuffix(name, "_FILE") {
			t.Errorf("%s set without secret.name", name)
		}
	}
	if len(d.Spec.Template.Spec.Volumes) != 0 {
		t.Errorf("volumes %v, want none", d.Spec.Template.Spec.Volumes)
	}
	checkRelays(t, o)
	checkMigrateJob(t, o, []string{"migrate"})
}

func TestShardsAndClusterEndpoints(t *testing.T) {
	o := mustRender(t, "testdata/shards-cluster.yaml")
	counts(t, o, map[string]int{"Deployment": 3, "PodDisruptionBudget": 3, "Service": 1, "ServiceAccount": 1,
		"Job": 1, "ConfigMap": 1, "ServiceMonitor": 1, "PrometheusRule": 1})
	var values struct {
		Database struct{ URL string }
		AMQP     struct{ URL string } `json:"amqp"`
	}
	readYAML(t, "testdata/shards-cluster.yaml", &values)
	for k, d := range o.Deployments {
		shard := string(rune('0' + k))
		if want := "relay-walbox-shard-" + shard; d.Name != want {
			t.Errorf("deployment %d is %q, want %q", k, d.Name, want)
		}
		c := relayContainer(t, d)
		if want := []string{"run", "--shards", "3", "--shard", shard}; !slices.Equal(c.Args, want) {
			t.Errorf("%s: args %q, want %q", d.Name, c.Args, want)
		}
		env := envOf(c)
		// Cluster endpoints reach walbox exactly as given.
		if env["WALBOX_DATABASE_URL"] != values.Database.URL || env["WALBOX_AMQP_URL"] != values.AMQP.URL {
			t.Errorf("%s: database %q, amqp %q; want the values as given", d.Name, env["WALBOX_DATABASE_URL"], env["WALBOX_AMQP_URL"])
		}
		for name, want := range map[string]string{
			"WALBOX_DATABASE_PASSWORD_FILE": "/etc/walbox/secrets/database-password",
			"WALBOX_AMQP_PASSWORD_FILE":     "/etc/walbox/secrets/amqp-password",
			"WALBOX_AMQP_CA_FILE":           "/etc/walbox/amqp-tls/ca.crt",
			"WALBOX_AMQP_CERT_FILE":         "/etc/walbox/amqp-tls/tls.crt",
			"WALBOX_AMQP_KEY_FILE":          "/etc/walbox/amqp-tls/tls.key",
			"WALBOX_CONFIG":                 "/etc/walbox/config/walbox.yaml",
		} {
			if env[name] != want {
				t.Errorf("%s: %s = %q, want %q", d.Name, name, env[name], want)
			}
		}
		for name, v := range env {
			if strings.Contains(strings.ToLower(v), "secret") && !strings.HasSuffix(name, "_FILE") {
				t.Errorf("%s: %s looks like a secret in the environment: %q", d.Name, name, v)
			}
		}
	}
	checkRelays(t, o)
	checkMigrateJob(t, o, []string{"migrate", "--shards", "3"})
	job := o.Jobs[0].Spec.Template.Spec.Containers[0]
	if env := envOf(job); env["WALBOX_DATABASE_URL"] != "postgres://walbox_owner@pg-rw.db:5432/app?sslmode=verify-full" ||
		env["WALBOX_DATABASE_PASSWORD_FILE"] != "/etc/walbox/secrets/owner-password" || env["WALBOX_RELAY_ROLE"] != "walbox" {
		t.Errorf("migrate job: the migrate overrides are not used: %v", env)
	}
	var cfg map[string]any
	if err := yaml.UnmarshalStrict([]byte(o.ConfigMaps[0].Data["walbox.yaml"]), &cfg); err != nil || cfg["window"] != 2048.0 {
		t.Errorf("config file %q (%v): want window 2048", o.ConfigMaps[0].Data["walbox.yaml"], err)
	}
	checkMonitoring(t, o, "walbox-orders")
}

// A YAML list of broker URLs becomes the comma-separated string walbox takes.
func TestAMQPURLList(t *testing.T) {
	o := mustRender(t, "testdata/shards-cluster.yaml", "testdata/amqp-list.yaml")
	var values struct {
		AMQP struct{ URL []string } `json:"amqp"`
	}
	readYAML(t, "testdata/amqp-list.yaml", &values)
	want := strings.Join(values.AMQP.URL, ",")
	for _, d := range o.Deployments {
		if got := envOf(relayContainer(t, d))["WALBOX_AMQP_URL"]; got != want {
			t.Errorf("%s: WALBOX_AMQP_URL %q, want %q", d.Name, got, want)
		}
	}
}

// The strict decode is what catches a misspelt field: Helm and the YAML parser accept it, and a
// lenient decode would drop it, shipping a pod with a writable root filesystem.
func TestStrictDecodeRejectsUnknownField(t *testing.T) {
	_, err := render(t, chartDir, "testdata/broken-typo.yaml")
	if err == nil || !strings.Contains(err.Error(), `unknown field "spec.template.spec.containers[0].securityContext.readOnlyRootFileSystem"`) {
		t.Fatalf("rendering a misspelt securityContext field: got %v, want an unknown field error", err)
	}
}

// values.schema.json rejects a misspelt value, which Helm would otherwise ignore silently.
func TestValuesSchemaRejectsMisspeltValue(t *testing.T) {
	_, err := render(t, chartDir, "testdata/broken-value.yaml")
	if err == nil || !strings.Contains(err.Error(), "additional properties 'replicaCont' not allowed") {
		t.Fatalf("rendering a misspelt value: got %v, want a schema error naming it", err)
	}
}

// A typo in a template fails too: a copy of the chart with one key misspelt.
func TestStrictDecodeRejectsBrokenTemplate(t *testing.T) {
	for _, tc := range []struct{ name, file, from, to, want string }{
		{"misspelt probe key", "deployment.yaml", "readinessProbe:", "readynessProbe:", `unknown field "spec.template.spec.containers[0].readynessProbe"`},
		{"wrong apiVersion", "pdb.yaml", "policy/v1", "policy/v1beta2", "unexpected policy/v1beta2"},
		{"misindented line", "serviceaccount.yaml", "\nautomountServiceAccountToken", "\n  automountServiceAccountToken", `unknown field "metadata.automountServiceAccountToken"`},
		{"misspelt in another case", "deployment.yaml", "imagePullPolicy:", "imagepullPolicy:", `unknown field "spec.template.spec.containers[0].imagepullPolicy"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyChart(t)
			path := filepath.Join(dir, "templates", tc.file)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), tc.from) {
				t.Fatalf("%s has no %q", tc.file, tc.from)
			}
			if err := os.WriteFile(path, []byte(strings.Replace(string(b), tc.from, tc.to, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := render(t, dir); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// files/prometheus-alerts.yml is a copy of deploy/prometheus-alerts.yml (a chart cannot read files
// outside itself): they must not drift apart.
func TestAlertRulesAreTheDeployCopy(t *testing.T) {
	chartCopy, err := os.ReadFile("walbox/files/prometheus-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	original, err := os.ReadFile("../prometheus-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	if string(chartCopy) != string(original) {
		t.Error("walbox/files/prometheus-alerts.yml differs from deploy/prometheus-alerts.yml: cp deploy/prometheus-alerts.yml deploy/helm/walbox/files/")
	}
}

// Every WALBOX_* variable the chart sets is one walbox reads, so a misspelt name cannot be
// silently ignored. The names are taken from walbox's own sources.
func TestEnvironmentNamesAreWalboxSettings(t *testing.T) {
	known := walboxEnvNames(t)
	for _, values := range [][]string{nil, {"testdata/shards-cluster.yaml"}} {
		o := mustRender(t, values...)
		var containers []corev1.Container
		for _, d := range o.Deployments {
			containers = append(containers, d.Spec.Template.Spec.Containers...)
		}
		for _, j := range o.Jobs {
			containers = append(containers, j.Spec.Template.Spec.Containers...)
		}
		for _, c := range containers {
			for _, e := range c.Env {
				if !strings.HasPrefix(e.Name, "WALBOX_") {
					continue
				}
				if !known[e.Name] && !known[strings.TrimSuffix(e.Name, "_FILE")] {
					t.Errorf("%v: %s sets %s, which walbox does not read", values, c.Name, e.Name)
				}
			}
		}
	}
}

func walboxEnvNames(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob("../../internal/cli/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("walbox's sources: %v (found %d files)", err, len(files))
	}
	known := map[string]bool{}
	re := regexp.MustCompile(`"(WALBOX_[A-Z0-9_]+)"`)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			known[m[1]] = true
		}
	}
	return known
}

// checkRelays checks what every relay Deployment must have: selectors that select its own pods
// (and the PDB the same pods), probes on a declared port, a non-root read-only container, and
// every file setting pointing into a mounted volume.
func checkRelays(t *testing.T, o *objects) {
	t.Helper()
	for i, d := range o.Deployments {
		spec := d.Spec.Template.Spec
		sel := selector(t, d.Spec.Selector.MatchLabels)
		if !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("%s: selector %v does not select its pods %v", d.Name, sel, d.Spec.Template.Labels)
		}
		for j, other := range o.Deployments {
			if j != i && sel.Matches(labels.Set(other.Spec.Template.Labels)) {
				t.Errorf("%s: selector also selects the pods of %s", d.Name, other.Name)
			}
		}
		pdbs := 0
		for _, p := range o.PDBs {
			if selector(t, p.Spec.Selector.MatchLabels).Matches(labels.Set(d.Spec.Template.Labels)) {
				pdbs++
				if p.Spec.MaxUnavailable == nil || p.Spec.MaxUnavailable.IntValue() != 1 {
					t.Errorf("%s: maxUnavailable %v, want 1", p.Name, p.Spec.MaxUnavailable)
				}
				if pol := p.Spec.UnhealthyPodEvictionPolicy; pol == nil || *pol != policyv1.AlwaysAllow {
					t.Errorf("%s: unhealthyPodEvictionPolicy %v: an outage would block node drains", p.Name, pol)
				}
			}
		}
		if pdbs != 1 {
			t.Errorf("%s: %d PodDisruptionBudgets select its pods, want 1", d.Name, pdbs)
		}
		if !selector(t, o.Services[0].Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("%s: the metrics Service does not select its pods", d.Name)
		}
		if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
			t.Errorf("%s: mounts a service account token", d.Name)
		}
		if g := spec.TerminationGracePeriodSeconds; g == nil || *g <= 10 {
			t.Errorf("%s: terminationGracePeriodSeconds %v, want more than walbox's 10 s shutdown timeout", d.Name, g)
		}
		c := relayContainer(t, d)
		checkPod(t, d.Name, spec, c)
		ports := map[string]int32{}
		for _, p := range c.Ports {
			ports[p.Name] = p.ContainerPort
		}
		for path, probe := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
			if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != path {
				t.Errorf("%s: no HTTP probe on %s: %+v", d.Name, path, probe)
				continue
			}
			if port := probe.HTTPGet.Port.String(); ports[port] == 0 {
				t.Errorf("%s: probe of %s on port %q, which the container does not declare", d.Name, path, port)
			}
		}
		if want := ":" + probePort(c); envOf(c)["WALBOX_LISTEN"] != want {
			t.Errorf("%s: WALBOX_LISTEN %q, want %q (the probes' port, on every address)", d.Name, envOf(c)["WALBOX_LISTEN"], want)
		}
		if r := c.Resources.Requests; r.Memory().IsZero() || r.Cpu().IsZero() {
			t.Errorf("%s: no memory or cpu request: %v", d.Name, r)
		}
	}
}

func probePort(c corev1.Container) string {
	for _, p := range c.Ports {
		if p.Name == c.ReadinessProbe.HTTPGet.Port.String() {
			return strconv.Itoa(int(p.ContainerPort))
		}
	}
	return ""
}

func yamlString(v any) string {
	b, err := yaml.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// checkPod checks the security settings and that each file setting is in a mounted volume.
func checkPod(t *testing.T, name string, spec corev1.PodSpec, c corev1.Container) {
	t.Helper()
	if psc := spec.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Errorf("%s: pod may run as root", name)
	}
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("%s: container's root filesystem is writable or it may escalate: %+v", name, sc)
	}
	volumes := map[string]bool{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = true
	}
	for _, m := range c.VolumeMounts {
		if !volumes[m.Name] {
			t.Errorf("%s: mounts volume %q, which the pod does not have", name, m.Name)
		}
	}
	for k, v := range envOf(c) {
		if !strings.HasSuffix(k, "_FILE") {
			continue
		}
		in := false
		for _, m := range c.VolumeMounts {
			in = in || (strings.HasPrefix(v, m.MountPath+"/") && m.ReadOnly)
		}
		if !in {
			t.Errorf("%s: %s=%s is not in a read-only mounted volume", name, k, v)
		}
	}
}

func checkMigrateJob(t *testing.T, o *objects, wantArgs []string) {
	t.Helper()
	j := o.Jobs[0]
	if hooks := j.Annotations["helm.sh/hook"]; hooks != "pre-install,pre-upgrade" {
		t.Errorf("migrate job hooks %q, want pre-install,pre-upgrade", hooks)
	}
	spec := j.Spec.Template.Spec
	if spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("migrate job restartPolicy %q", spec.RestartPolicy)
	}
	// It runs before the release's service account and config map exist.
	if spec.ServiceAccountName != "" {
		t.Errorf("migrate job uses service account %q, which a pre-install hook cannot rely on", spec.ServiceAccountName)
	}
	c := spec.Containers[0]
	if !slices.Equal(c.Args, wantArgs) {
		t.Errorf("migrate job args %q, want %q", c.Args, wantArgs)
	}
	checkPod(t, j.Name, spec, c)
	for _, v := range spec.Volumes {
		if v.ConfigMap != nil {
			t.Errorf("migrate job mounts config map %q, which does not exist yet at pre-install", v.ConfigMap.Name)
		}
	}
}

func checkMonitoring(t *testing.T, o *objects, job string) {
	t.Helper()
	svc, sm := o.Services[0], o.ServiceMonitors[0]
	if !selector(t, sm.Spec.Selector.MatchLabels).Matches(labels.Set(svc.Labels)) {
		t.Errorf("ServiceMonitor selector %v does not select the metrics Service %v", sm.Spec.Selector.MatchLabels, svc.Labels)
	}
	if got := svc.Labels[sm.Spec.JobLabel]; got != job {
		t.Errorf("job label %q on the Service is %q, want %q", sm.Spec.JobLabel, got, job)
	}
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != svc.Spec.Ports[0].Name {
		t.Errorf("ServiceMonitor endpoints %+v, want the Service's port %q", sm.Spec.Endpoints, svc.Spec.Ports[0].Name)
	}
	// The rules are deploy/prometheus-alerts.yml's, with the job matchers set to the job, plus the
	// per-shard rule.
	var file struct{ Groups []monitoringv1.RuleGroup }
	b, err := os.ReadFile("../prometheus-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	b = []byte(strings.ReplaceAll(string(b), `job="walbox"`, `job="`+job+`"`))
	if err := yaml.UnmarshalStrict(b, &file); err != nil {
		t.Fatal(err)
	}
	got := o.PrometheusRules[0].Spec.Groups
	if len(got) != len(file.Groups)+1 || !reflect.DeepEqual(got[:len(file.Groups)], file.Groups) {
		t.Errorf("PrometheusRule groups differ from deploy/prometheus-alerts.yml:\n got %s\nwant %s", yamlString(got), yamlString(file.Groups))
	}
	if !strings.Contains(yamlString(got), `job="`+job+`"`) || strings.Contains(yamlString(got), `job="walbox"`) {
		t.Errorf("job matchers not set to %q", job)
	}
	canary := false
	for _, r := range got[0].Rules {
		canary = canary || r.Alert == "WalboxCanaryStale" && strings.Contains(r.Expr.String(),
			"walbox_canary_age_seconds > 2 * walbox_canary_interval_seconds")
	}
	if !canary {
		t.Error("no rule WalboxCanaryStale on walbox_canary_age_seconds over two walbox_canary_interval_seconds")
	}
	if last := got[len(got)-1]; len(last.Rules) != 1 || last.Rules[0].Alert != "WalboxShardNoActiveInstance" {
		t.Errorf("last group %+v, want the per-shard rule", last)
	}
}

func counts(t *testing.T, o *objects, want map[string]int) {
	t.Helper()
	got := map[string]int{
		"Deployment": len(o.Deployments), "PodDisruptionBudget": len(o.PDBs), "Service": len(o.Services),
		"ServiceAccount": len(o.ServiceAccounts), "ConfigMap": len(o.ConfigMaps), "Job": len(o.Jobs),
		"ServiceMonitor": len(o.ServiceMonitors), "PrometheusRule": len(o.PrometheusRules),
	}
	for k, n := range got {
		if n != want[k] {
			t.Errorf("%d %s objects, want %d", n, k, want[k])
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

func relayContainer(t *testing.T, d *appsv1.Deployment) corev1.Container {
	t.Helper()
	cs := d.Spec.Template.Spec.Containers
	if len(cs) != 1 || cs[0].Name != "walbox" {
		t.Fatalf("%s: containers %v, want one named walbox", d.Name, cs)
	}
	return cs[0]
}

func envOf(c corev1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	return env
}

func selector(t *testing.T, m map[string]string) labels.Selector {
	t.Helper()
	if len(m) == 0 {
		t.Fatal("empty selector: it would select everything")
	}
	return labels.SelectorFromSet(m)
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

// copyChart copies the chart into a temporary directory, to break a copy of it.
func copyChart(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "walbox")
	if err := os.CopyFS(dst, os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	return dst
}

// e2eEnv is what a pod of the chart runs: the command line and environment of the relay and of
// the migrate job, and the config file. test/e2e runs the real binary with it.
type e2eEnv struct {
	Relay, Migrate container
	Config         string
}

type container struct {
	Args []string
	Env  map[string]string
}

// TestE2EEnvironmentIsCurrent keeps testdata/e2e-env.json equal to what the chart renders, so
// that the end-to-end test of the main module runs walbox as the chart does (go test -update
// rewrites it).
func TestE2EEnvironmentIsCurrent(t *testing.T) {
	o := mustRender(t, "testdata/e2e-values.yaml")
	relay, migrate := relayContainer(t, o.Deployments[0]), o.Jobs[0].Spec.Template.Spec.Containers[0]
	got := e2eEnv{
		Relay:   container{Args: relay.Args, Env: envOf(relay)},
		Migrate: container{Args: migrate.Args, Env: envOf(migrate)},
		Config:  o.ConfigMaps[0].Data["walbox.yaml"],
	}
	for _, c := range []corev1.Container{relay, migrate} {
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.Name != "GOMEMLIMIT" {
				t.Errorf("%s: %s comes from %v, which the end-to-end test cannot reproduce", c.Name, e.Name, e.ValueFrom)
			}
		}
	}
	delete(got.Relay.Env, "GOMEMLIMIT")
	b, err := json.MarshalIndent(got, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, '\n')
	const path = "testdata/e2e-env.json"
	if *update {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != string(b) {
		t.Errorf("%s is not what the chart renders; run go test -update in deploy/helm and check the diff:\n%s", path, b)
	}
}

// The relay's memory settings agree with its largest message: the limit holds 64Mi plus four
// messages of the maximum size (a row costs about its size once, at most twice), and GOMEMLIMIT
// is set below the limit, so that the runtime collects before the pod is killed.
func TestMemoryAgreesWithMaxMessageSize(t *testing.T) {
	c := relayContainer(t, mustRender(t).Deployments[0])
	env := envOf(c)
	size, err := strconv.ParseInt(env["WALBOX_MAX_MESSAGE_SIZE"], 10, 64)
	if err != nil || size != 16<<20 {
		t.Fatalf("WALBOX_MAX_MESSAGE_SIZE %q, want 16777216 (RabbitMQ 4's max_message_size)", env["WALBOX_MAX_MESSAGE_SIZE"])
	}
	limit := c.Resources.Limits.Memory().Value()
	if want := int64(64<<20) + 4*size; limit < want {
		t.Errorf("memory limit %d bytes, want at least %d (64Mi + 4 x %d)", limit, want, size)
	}
	if got := env["GOMEMLIMIT"]; got != "112MiB" || limit != 128<<20 {
		t.Errorf("GOMEMLIMIT %q with a limit of %d bytes, want 112MiB under 128Mi", got, limit)
	}
}
