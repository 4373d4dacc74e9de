// Package deploy_test checks the monitoring files in deploy/: the
// Prometheus alerting rules, their promtool unit tests and the Grafana
// dashboard. Every metric and label they use must be one that Herald's
// docs/operations.md documents ("Metrics and health"), so that they
// cannot drift from what heraldprom exports; promtool, when installed,
// checks the rules' syntax, runs their unit tests and parses every
// dashboard query.
package deploy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	// testify's indirection to go.yaml.in/yaml/v3: testify is already a
	// direct requirement, so reading YAML here adds none to go.mod.
	"github.com/stretchr/testify/assert/yaml"

	"github.com/herald-outbox/herald/internal/testenv"
)

const (
	metricsDoc    = "../docs/operations.md"
	repoRoot      = ".."
	rulesPath     = "prometheus/herald-alerts.yml"
	rulesTestPath = "prometheus/herald-alerts_test.yml"
	dashboardPath = "grafana/herald-dashboard.json"
)

// The alerts the rules file must define.
var wantAlerts = []string{
	"HeraldOldestPendingTooOld",
	"HeraldDeadLetters",
	"HeraldParkedKeys",
	"HeraldRelayDown",
	"HeraldPublishErrorRate",
	"HeraldDestinationDown",
	"HeraldBacklogStale",
	"HeraldCDCSlotRetainingWAL",
	"HeraldCDCSlotLost",
}

// The herald commands the runbook hints must name between them.
var wantCommands = []string{
	"herald status",
	"herald dead list",
	"herald keys blocked",
	"herald dead requeue",
	"herald dead discard",
	"--resume",
}

// Labels Prometheus adds to every series it scrapes.
var targetLabels = []string{"job", "instance"}

// Labels whose values the metrics table enumerates in the metric's
// meaning, as `value`: a matcher on one of them must use a documented value.
var enumeratedLabels = map[string]bool{"outcome": true, "state": true}

// metricDoc is one row of the metrics table.
type metricDoc struct {
	kind    string   // gauge, counter, histogram
	labels  []string // documented labels
	meaning string
}

var (
	metricName = regexp.MustCompile(`\bherald_[a-z_]+`)
	// A selector with matchers: herald_x{a="b", c=~"d"}.
	selector = regexp.MustCompile(`\b(herald_[a-z_]+)\s*\{([^}]*)\}`)
	matcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"`)
	backtick = regexp.MustCompile("`([^`]+)`")
)

// repoURL is where a runbook_url points into the repository, and
// runbookBase the page of the runbook sections, one per alert, anchored by
// the alert's name.
const (
	repoURL     = "https://github.com/herald-outbox/herald/blob/main/"
	runbookBase = repoURL + "docs/operations.md#"
)

// followRepoURL checks that a URL into the repository names a file that
// exists and, for a Markdown file, a heading that gives its anchor (GitHub's
// rule: lower-case, punctuation dropped, spaces as hyphens, a repeated
// heading numbered -1, -2...). It returns what is wrong, or "".
func followRepoURL(u string) string {
	rest, ok := strings.CutPrefix(u, repoURL)
	if !ok {
		return "does not start with " + repoURL
	}
	file, anchor, _ := strings.Cut(rest, "#")
	b, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(file)))
	if err != nil {
		return fmt.Sprintf("no file %s in the repository", file)
	}
	if anchor == "" || !strings.HasSuffix(file, ".md") {
		return ""
	}
	if !slices.Contains(markdownAnchors(string(b)), anchor) {
		return fmt.Sprintf("%s has no heading with the anchor #%s", file, anchor)
	}
	return ""
}

var (
	headingLine = regexp.MustCompile(`^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$`)
	notInAnchor = regexp.MustCompile(`[^\p{L}\p{M}\p{N}_\- ]`)
)

// markdownAnchors are the anchors of a Markdown text's headings, fenced
// code left out.
func markdownAnchors(text string) []string {
	var anchors []string
	seen := map[string]int{}
	inFence := false
	for line := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		m := headingLine.FindStringSubmatch(line)
		if inFence || m == nil {
			continue
		}
		a := strings.ToLower(strings.TrimSpace(strings.ReplaceAll(m[1], "`", "")))
		a = strings.ReplaceAll(notInAnchor.ReplaceAllString(a, ""), " ", "-")
		if n, dup := seen[a]; dup {
			seen[a] = n + 1
			a = fmt.Sprintf("%s-%d", a, n+1)
		} else {
			seen[a] = 0
		}
		anchors = append(anchors, a)
	}
	return anchors
}

// docMetrics parses the table of the "Metrics and health" section of
// docs/operations.md.
func docMetrics(t *testing.T) map[string]metricDoc {
	t.Helper()
	b, err := os.ReadFile(metricsDoc)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "\n## Metrics and health\n")
	if start < 0 {
		t.Fatalf("%s has no \"## Metrics and health\" section", metricsDoc)
	}
	section := text[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	docs := map[string]metricDoc{}
	for line := range strings.SplitSeq(section, "\n") {
		if !strings.HasPrefix(line, "| `herald_") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) < 4 {
			t.Fatalf("%s: metrics table row with %d cells: %q", metricsDoc, len(cells), line)
		}
		name := strings.Trim(strings.TrimSpace(cells[0]), "`")
		d := metricDoc{
			kind:    strings.TrimSpace(cells[1]),
			meaning: strings.TrimSpace(strings.Join(cells[3:], "|")),
		}
		for l := range strings.SplitSeq(cells[2], ",") {
			if l = strings.TrimSpace(l); l != "" {
				d.labels = append(d.labels, l)
			}
		}
		docs[name] = d
	}
	// Guard against the table changing shape and this parser reading
	// nothing: heraldprom exports more than ten herald_ metrics.
	if len(docs) < 10 {
		t.Fatalf("%s: read only %d metrics from the \"Metrics and health\" table: %v", metricsDoc, len(docs), docs)
	}
	return docs
}

// resolve returns the documented metric a name in an expression refers to:
// the name itself, or for a histogram's _bucket, _count and _sum series
// the histogram.
func resolve(docs map[string]metricDoc, name string) (string, bool) {
	if _, ok := docs[name]; ok {
		return name, true
	}
	for _, suffix := range []string{"_bucket", "_count", "_sum"} {
		base, ok := strings.CutSuffix(name, suffix)
		if ok && docs[base].kind == "histogram" {
			return base, true
		}
	}
	return "", false
}

// checkText reports every metric name in text that the metrics table does
// not document, and every label matcher on a herald metric that uses a label
// (or, for enumerated labels, a value) the table does not list. It
// returns the documented metrics text uses.
func checkText(t *testing.T, docs map[string]metricDoc, where, text string) []string {
	t.Helper()
	var used []string
	for _, name := range metricName.FindAllString(text, -1) {
		base, ok := resolve(docs, name)
		if !ok {
			t.Errorf("%s: metric %s is not documented in %s (\"Metrics and health\")", where, name, metricsDoc)
			continue
		}
		used = append(used, base)
	}
	for _, sel := range selector.FindAllStringSubmatch(text, -1) {
		name, matchers := sel[1], sel[2]
		base, ok := resolve(docs, name)
		if !ok {
			continue // reported above
		}
		d := docs[base]
		allowed := append(slices.Clone(targetLabels), d.labels...)
		if base != name && strings.HasSuffix(name, "_bucket") {
			allowed = append(allowed, "le")
		}
		for _, m := range matcher.FindAllStringSubmatch(matchers, -1) {
			label, op, value := m[1], m[2], m[3]
			if !slices.Contains(allowed, label) {
				t.Errorf("%s: %s{%s}: label %q is not documented for %s (documented: %v)", where, name, matchers, label, base, d.labels)
				continue
			}
			if !enumeratedLabels[label] || (op != "=" && op != "!=") {
				continue
			}
			var values []string
			for _, v := range backtick.FindAllStringSubmatch(d.meaning, -1) {
				values = append(values, v[1])
			}
			if !slices.Contains(values, value) {
				t.Errorf("%s: %s{%s}: %s=%q is not a documented value (documented: %v)", where, name, matchers, label, value, values)
			}
		}
	}
	return used
}

type rulesFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

type rulesTestFile struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		Name        string `yaml:"name"`
		InputSeries []struct {
			Series string `yaml:"series"`
		} `yaml:"input_series"`
		AlertRuleTest []struct {
			EvalTime  string `yaml:"eval_time"`
			Alertname string `yaml:"alertname"`
			ExpAlerts []struct {
				ExpLabels      map[string]string `yaml:"exp_labels"`
				ExpAnnotations map[string]string `yaml:"exp_annotations"`
			} `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

func decodeYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// The keys a Prometheus alerting rule may have.
var ruleKeys = []string{"alert", "expr", "for", "keep_firing_for", "labels", "annotations"}

func TestAlertRules(t *testing.T) {
	docs := docMetrics(t)
	var rf rulesFile
	decodeYAML(t, rulesPath, &rf)

	// A misspelt key (anotations:) would decode to nothing above.
	var raw struct {
		Groups []struct {
			Rules []map[string]any `yaml:"rules"`
		} `yaml:"groups"`
	}
	decodeYAML(t, rulesPath, &raw)
	for _, g := range raw.Groups {
		for _, r := range g.Rules {
			for k := range r {
				if !slices.Contains(ruleKeys, k) {
					t.Errorf("%s: rule %v: unknown key %q", rulesPath, r["alert"], k)
				}
			}
		}
	}

	var alerts []string
	var runbooks strings.Builder
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			where := fmt.Sprintf("%s: rule %s%s", rulesPath, r.Alert, r.Record)
			if r.Alert == "" {
				t.Errorf("%s: group %s has a rule that is not an alert", rulesPath, g.Name)
				continue
			}
			alerts = append(alerts, r.Alert)
			if len(checkText(t, docs, where+" expr", r.Expr)) == 0 {
				t.Errorf("%s: expr uses no herald metric: %q", where, r.Expr)
			}
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("%s: severity label %q, want warning or critical", where, s)
			}
			for _, a := range []string{"summary", "description", "runbook", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("%s: no %s annotation", where, a)
				}
			}
			// The runbook_url points at the runbook's section on the
			// alert, which must exist.
			if want := runbookBase + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
				t.Errorf("%s: runbook_url %q, want %q", where, r.Annotations["runbook_url"], want)
			}
			if problem := followRepoURL(r.Annotations["runbook_url"]); problem != "" {
				t.Errorf("%s: runbook_url %q: %s", where, r.Annotations["runbook_url"], problem)
			}
			for k, v := range r.Annotations {
				checkText(t, docs, where+" annotation "+k, v)
				if k == "runbook" {
					runbooks.WriteString(v + "\n")
				}
			}
		}
	}
	sort.Strings(alerts)
	want := slices.Sorted(slices.Values(wantAlerts))
	if !slices.Equal(alerts, want) {
		t.Errorf("%s defines alerts %v, want %v", rulesPath, alerts, want)
	}
	for _, c := range wantCommands {
		if !strings.Contains(runbooks.String(), c) {
			t.Errorf("%s: no runbook annotation mentions %q", rulesPath, c)
		}
	}
}

// TestAlertRulesTests checks that the promtool unit tests use documented
// series only and show every alert both firing and not firing.
func TestAlertRulesTests(t *testing.T) {
	docs := docMetrics(t)
	var tf rulesTestFile
	decodeYAML(t, rulesTestPath, &tf)
	if !slices.Contains(tf.RuleFiles, filepath.Base(rulesPath)) {
		t.Errorf("%s: rule_files %v does not load %s", rulesTestPath, tf.RuleFiles, filepath.Base(rulesPath))
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tf.Tests {
		for _, s := range tc.InputSeries {
			checkText(t, docs, fmt.Sprintf("%s: test %q series", rulesTestPath, tc.Name), s.Series)
		}
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for _, a := range wantAlerts {
		if !fires[a] {
			t.Errorf("%s: no test shows %s firing", rulesTestPath, a)
		}
		if !quiet[a] {
			t.Errorf("%s: no test shows %s not firing", rulesTestPath, a)
		}
	}
}

type dashboard struct {
	Title         string `json:"title"`
	UID           string `json:"uid"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Definition string          `json:"definition"`
			Datasource *datasource     `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	Targets    []struct {
		RefID      string      `json:"refId"`
		Expr       string      `json:"expr"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's panels
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	return d
}

// allPanels flattens rows.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// query is one of the dashboard's panel queries.
type query struct {
	panelID int
	title   string
	refID   string
	expr    string
}

// dashboardQueries returns every query of the dashboard's panels.
func dashboardQueries(d dashboard) []query {
	var qs []query
	for _, p := range allPanels(d.Panels) {
		for _, tg := range p.Targets {
			qs = append(qs, query{panelID: p.ID, title: p.Title, refID: tg.RefID, expr: tg.Expr})
		}
	}
	return qs
}

func TestDashboard(t *testing.T) {
	docs := docMetrics(t)
	d := readDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("%s: uid %q, title %q: both are needed", dashboardPath, d.UID, d.Title)
	}
	if d.SchemaVersion < 36 {
		t.Errorf("%s: schemaVersion %d, want 36 or later", dashboardPath, d.SchemaVersion)
	}

	vars := map[string]int{}
	for i, v := range d.Templating.List {
		vars[v.Name] = i
	}
	if i, ok := vars["datasource"]; !ok {
		t.Errorf("%s: no datasource variable", dashboardPath)
	} else if v := d.Templating.List[i]; v.Type != "datasource" || string(v.Query) != `"prometheus"` {
		t.Errorf("%s: datasource variable has type %q, query %s; want datasource, \"prometheus\"", dashboardPath, v.Type, v.Query)
	}
	if i, ok := vars["topic"]; !ok {
		t.Errorf("%s: no topic variable", dashboardPath)
	} else {
		v := d.Templating.List[i]
		// Topics that published list as well as topics with events
		// waiting: on a healthy system nothing waits, and the pending
		// gauges have no series.
		want := `label_values({__name__=~"herald_published_total|herald_pending_events", job=~"$job"}, topic)`
		if v.Definition != want {
			t.Errorf("%s: topic variable is %q, want %q", dashboardPath, v.Definition, want)
		}
	}
	for _, v := range d.Templating.List {
		where := fmt.Sprintf("%s: variable %s", dashboardPath, v.Name)
		if v.Type == "query" {
			if v.Datasource == nil || v.Datasource.UID != "${datasource}" {
				t.Errorf("%s: datasource %+v, want uid ${datasource}", where, v.Datasource)
			}
			var q struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &q); err != nil || q.Query != v.Definition {
				t.Errorf("%s: query %s does not match its definition %q", where, v.Query, v.Definition)
			}
			checkText(t, docs, where, v.Definition)
		}
	}

	ids := map[int]string{}
	used := map[string]bool{}
	for _, p := range allPanels(d.Panels) {
		where := fmt.Sprintf("%s: panel %d %q", dashboardPath, p.ID, p.Title)
		if other, dup := ids[p.ID]; dup {
			t.Errorf("%s: id also used by %q", where, other)
		}
		ids[p.ID] = p.Title
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("%s: datasource %+v, want uid ${datasource}", where, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("%s: no queries", where)
		}
		for _, tg := range p.Targets {
			if tg.Datasource != nil && tg.Datasource.UID != "${datasource}" {
				t.Errorf("%s: query %s: datasource %+v, want uid ${datasource}", where, tg.RefID, tg.Datasource)
			}
			names := checkText(t, docs, fmt.Sprintf("%s query %s", where, tg.RefID), tg.Expr)
			if len(names) == 0 {
				t.Errorf("%s: query %s uses no herald metric: %q", where, tg.RefID, tg.Expr)
			}
			for _, n := range names {
				used[n] = true
			}
		}
	}
	for name := range docs {
		if !used[name] {
			// Not an error: a metric added to the metrics table need not block
			// other work, but it should get a panel.
			t.Logf("%s: no panel shows %s", dashboardPath, name)
		}
	}
}

// promtool returns promtool's path, or skips the test when it is not
// installed, except under CI (CI=true), where the test fails.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err == nil {
		return path
	}
	testenv.Unavailable(t, "promtool is not on PATH (apt-get install prometheus provides promtool)")
	return ""
}

func runPromtool(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), promtool(t), args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func TestPromtoolCheckRules(t *testing.T) {
	runPromtool(t, "check", "rules", rulesPath)
}

func TestPromtoolTestRules(t *testing.T) {
	runPromtool(t, "test", "rules", rulesTestPath)
}

// TestPromtoolDashboardQueries parses every dashboard query with promtool,
// as recording rules, after putting plain values in for the dashboard's
// variables.
func TestPromtoolDashboardQueries(t *testing.T) {
	promtool(t)
	d := readDashboard(t)
	vars := strings.NewReplacer(
		"${datasource}", "prometheus",
		"$__rate_interval", "5m",
		"$__interval", "1m",
		"$__range", "1h",
		"$job", ".*",
		"$topic", ".*",
	)
	type rule struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	var rules []rule
	for _, q := range dashboardQueries(d) {
		e := vars.Replace(q.expr)
		if strings.Contains(e, "$") {
			t.Errorf("%s: panel %d %q query %s uses a variable this test does not know: %q", dashboardPath, q.panelID, q.title, q.refID, e)
			continue
		}
		// promtool names the rule of a query that does not parse.
		rules = append(rules, rule{Record: fmt.Sprintf("dashboard:panel_%d_query_%s", q.panelID, q.refID), Expr: e})
	}
	// JSON is YAML: promtool reads it as a rules file.
	out, err := json.MarshalIndent(map[string]any{
		"groups": []map[string]any{{"name": "dashboard", "rules": rules}},
	}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "dashboard-queries.yml")
	if err := os.WriteFile(file, out, 0o600); err != nil {
		t.Fatal(err)
	}
	runPromtool(t, "check", "rules", file)
}
