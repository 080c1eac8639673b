package mirrorcli

import (
	"strings"
	"testing"
)

const goodMirrorsFile = `# two mirrors
mirrors:
  - name: dr
    configs:
      bootstrap.servers: src:9092
      security.protocol: SASL_SSL
      sasl.mechanism: SCRAM-SHA-512
      sasl.username: kmirror
      sasl.password: ${file:/etc/kmirror/secrets.properties:dr.password}
      replication.throttled.rate: 1048576
    topics: [orders, payments]
    patterns: ['logs-.*']
    paused: [payments]
    failed_over: [legacy]
  - name: old
    deleted: true
`

func TestParseMirrorsFile(t *testing.T) {
	f, err := ParseMirrorsFile("m.yaml", []byte(goodMirrorsFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Mirrors) != 2 || f.Mirrors[0].Configs["replication.throttled.rate"] != "1048576" || !f.Mirrors[1].Deleted {
		t.Fatalf("parsed %+v", f)
	}
	if got := f.Mirrors[0].DesiredConfigs()["topics.include"]; got != "logs-.*" {
		t.Fatalf("patterns become topics.include, got %q", got)
	}
}

// Every bad file gets an error that names the file, the line and the fix.
func TestParseMirrorsFileErrors(t *testing.T) {
	for _, c := range []struct{ name, text, want string }{
		{"empty", "", "m.yaml: the file is empty"},
		{"syntax", "mirrors:\n  - name: [a\n", "m.yaml:1: did not find expected ',' or ']'"}, // the line yaml.v3 names
		{"misspelt key", "mirrors:\n  - name: a\n    topic: [x]\n", "m.yaml:3: field topic not found"},
		{"no mirrors", "mirrors: []\n", "no mirrors"},
		{"no name", "mirrors:\n  - topics: [a]\n", "m.yaml:2: a mirror has no name"},
		{"twice", "mirrors:\n  - name: a\n    configs: {bootstrap.servers: s:1}\n  - name: a\n    configs: {bootstrap.servers: s:1}\n", "m.yaml:4: mirror a is declared twice"},
		{"bad topic", "mirrors:\n  - name: a\n    configs: {bootstrap.servers: s:1}\n    topics:\n      - ok\n      - 'bad name'\n", `m.yaml:6: "bad name" is not a topic name`},
		{"bad pattern", "mirrors:\n  - name: a\n    configs: {bootstrap.servers: s:1}\n    patterns: ['(']\n", "m.yaml:4: mirror a: pattern \"(\" does not compile"},
		{"clear secret", "mirrors:\n  - name: a\n    configs:\n      bootstrap.servers: s:1\n      sasl.password: hunter2\n", "m.yaml:5: mirror a: sasl.password is a secret written in clear"},
		{"jaas", "mirrors:\n  - name: a\n    configs:\n      bootstrap.servers: s:1\n      sasl.jaas.config: x\n", "m.yaml:5: mirror a: sasl.jaas.config holds a password"},
		{"bad reference", "mirrors:\n  - name: a\n    configs:\n      bootstrap.servers: s:1\n      sasl.password: ${vault:x}\n", "unknown config provider"},
		{"unknown config", "mirrors:\n  - name: a\n    configs:\n      bootstrap.servers: s:1\n      fetch.max.byte: 1\n", `m.yaml:5: mirror a: unknown mirror config "fetch.max.byte"`},
		{"no bootstrap", "mirrors:\n  - name: a\n    topics: [x]\n", "mirror config bootstrap.servers is required"},
		{"failed over and mirrored", "mirrors:\n  - name: a\n    configs: {bootstrap.servers: s:1}\n    topics: [x]\n    failed_over: [x]\n", "m.yaml:5: mirror a: topic x is both failed over and mirrored"},
		{"paused not mirrored", "mirrors:\n  - name: a\n    configs: {bootstrap.servers: s:1}\n    paused: [x]\n", "m.yaml:4: mirror a: paused topic x is not in topics"},
		{"listed twice", "mirrors:\n  - name: a\n    configs: {bootstrap.servers: s:1}\n    topics: [x, x]\n", "m.yaml:4: topic x is listed twice"},
		{"bad value", "mirrors:\n  - name: a\n    configs:\n      bootstrap.servers: s:1\n      fetch.max.bytes: lots\n", `m.yaml:5: mirror a: mirror config fetch.max.bytes="lots": not a whole number`},
		{"wrong type", "mirrors:\n  - name: a\n    deleted: maybe\n", "m.yaml:3:"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseMirrorsFile("m.yaml", []byte(c.text))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

// observedDR is mirror dr as the proxy would report it.
func observedDR() map[string]*observedMirror {
	return map[string]*observedMirror{"dr": {
		name: "dr",
		configs: map[string]mirrorConfig{
			"bootstrap.servers":          {value: "src:9092", set: true},
			"sasl.password":              {set: true, sensitive: true},
			"replication.throttled.rate": {value: "1048576", set: true},
			"fetch.max.bytes":            {value: "2048", set: true},
			"topics.include":             {value: "logs-.*", set: true},
			"fetch.wait.max.ms":          {value: "500"},
		},
		topics: map[string]topicState{"orders": topicMirroring, "payments": topicPaused, "legacy": topicFailedOver, "logs-a": topicMirroring},
	}}
}

func planTexts(p *plan) string {
	var b strings.Builder
	for _, c := range p.changes {
		b.WriteString(c.text + "\n")
	}
	for _, n := range p.notes {
		b.WriteString("note: " + n + "\n")
	}
	for _, e := range p.errs {
		b.WriteString("error: " + e + "\n")
	}
	return b.String()
}

func TestMakePlan(t *testing.T) {
	f, err := ParseMirrorsFile("m.yaml", []byte(`mirrors:
  - name: dr
    configs:
      bootstrap.servers: src:9092
      sasl.username: u
      security.protocol: SASL_PLAINTEXT
      sasl.password: ${env:PW}
      replication.throttled.rate: 2097152
    topics: [orders, payments, fresh]
    patterns: ['logs-.*']
    failed_over: [legacy]
  - name: new
    configs: {bootstrap.servers: other:9092}
    topics: [a]
`))
	if err != nil {
		t.Fatal(err)
	}
	obs := observedDR()
	obs["dr"].configs["security.protocol"] = mirrorConfig{value: "SASL_PLAINTEXT", set: true}
	obs["dr"].configs["sasl.username"] = mirrorConfig{value: "u", set: true}
	got := planTexts(makePlan(f, obs))
	want := `~ mirror dr: config replication.throttled.rate: 1048576 -> 2097152
~ mirror dr: config fetch.max.bytes: 2048 -> default 1048576
+ mirror dr: add topic fresh
~ mirror dr: resume topic payments
+ create mirror new (bootstrap.servers=other:9092)
+ mirror new: add topic a
`
	if got != want {
		t.Fatalf("plan:\n%s\nwant:\n%s", got, want)
	}
}

func TestMakePlanDestructiveAndImpossible(t *testing.T) {
	f, err := ParseMirrorsFile("m.yaml", []byte(`mirrors:
  - name: dr
    configs: {bootstrap.servers: elsewhere:9092}
    topics: [orders, payments, legacy]
    paused: [orders, payments]
`))
	if err != nil {
		t.Fatal(err)
	}
	p := makePlan(f, observedDR())
	got := planTexts(p)
	for _, want := range []string{
		"! mirror dr: pause topic orders (copying stops)",
		"note: mirror dr: topic logs-a is mirrored but not in the file: left as is",
		`error: mirror dr: bootstrap.servers is "src:9092", the file says "elsewhere:9092"`,
		"error: mirror dr: topic legacy was failed over and cannot mirror again",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("plan lacks %q:\n%s", want, got)
		}
	}
	if d := p.destructive(); len(d) != 1 {
		t.Errorf("destructive: %q", d)
	}
	del := makePlan(&MirrorsFile{Mirrors: []MirrorSpec{{Name: "dr", Deleted: true}}}, observedDR())
	if got, want := planTexts(del), "- mirror dr: fail over topics logs-a, orders, payments (they stop mirroring for good and become writable)\n- delete mirror dr\n"; got != want {
		t.Errorf("delete plan:\n%s\nwant:\n%s", got, want)
	}
}

// What --export writes parses, and planned against what it came from, is
// no change at all.
func TestExportRoundTrip(t *testing.T) {
	obs := observedDR()
	out, err := MarshalMirrorsFile(exportFile(obs), "header")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "sasl.password: ${env:KMIRROR_DR_SASL_PASSWORD}") || strings.Contains(string(out), "fetch.wait.max.ms") {
		t.Fatalf("export:\n%s", out)
	}
	f, err := ParseMirrorsFile("export.yaml", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if p := makePlan(f, obs); len(p.changes) != 0 || len(p.errs) != 0 || len(p.notes) != 0 {
		t.Fatalf("export then plan: %s\n%s", planTexts(p), out)
	}
}

func FuzzParseMirrorsFile(f *testing.F) {
	f.Add(goodMirrorsFile)
	f.Add("mirrors:\n  - name: a\n    configs: {bootstrap.servers: s:1}\n    topics: [x, x]\n")
	f.Add("mirrors: [{name: a, deleted: true}]")
	f.Fuzz(func(t *testing.T, text string) {
		mf, err := ParseMirrorsFile("fuzz.yaml", []byte(text))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.yaml") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		// A file that parses plans against nothing without panicking, and
		// its marshalled form parses again.
		makePlan(mf, map[string]*observedMirror{})
		out, err := MarshalMirrorsFile(mf, "x")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseMirrorsFile("fuzz.yaml", out); err != nil {
			t.Fatalf("re-parse: %v\n%s", err, out)
		}
	})
}
