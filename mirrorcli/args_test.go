package mirrorcli

import (
	"bytes"
	"errors"
	"flag"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseTopics(t *testing.T) {
	for _, tc := range []struct {
		in      string
		names   []string
		pattern string
		err     string
	}{
		{in: "orders", names: []string{"orders"}},
		{in: "orders,payments", names: []string{"orders", "payments"}},
		{in: " orders , payments ,orders", names: []string{"orders", "payments"}}, // trimmed, deduplicated
		{in: "orders.v1,my_topic-2", names: []string{"orders.v1", "my_topic-2"}},  // '.' alone is a name
		{in: "orders-.*", pattern: "orders-.*"},
		{in: "orders|payments", pattern: "orders|payments"},
		{in: "a{1,3}", pattern: "a{1,3}"}, // commas belong to the pattern
		{in: "(orders.v.)", pattern: "(orders.v.)"},
		{in: "orders,.*", pattern: "orders,.*"},
		{in: "", err: "--topics is empty"},
		{in: "orders,,payments", err: "empty topic name"},
		{in: "orders,", err: "empty topic name"},
		{in: "..", err: "not a valid topic name"},
		{in: strings.Repeat("x", 250), err: "longer than Kafka's limit"},
		{in: "orders[", err: "does not compile"},
	} {
		got, err := ParseTopics("--topics", tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !IsUsage(err) {
				t.Errorf("%q: error %v, want usage error containing %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if got.Pattern != tc.pattern || !reflect.DeepEqual(got.Names, tc.names) {
			t.Errorf("%q: got names %q pattern %q, want %q %q", tc.in, got.Names, got.Pattern, tc.names, tc.pattern)
		}
	}
}

func TestParseMirrorsArgs(t *testing.T) {
	bs := []string{"--bootstrap-server", "proxy:9092"}
	for _, tc := range []struct {
		name string
		args []string
		want *MirrorsArgs // nil when err is set
		err  string       // substring of the usage error
	}{
		{"list", []string{"--list"}, &MirrorsArgs{Action: ActList}, ""},
		{"list json single dash", []string{"-list", "-json"}, &MirrorsArgs{Action: ActList, JSON: true}, ""},
		{"describe all failed json", []string{"--describe", "--failed", "--json"}, &MirrorsArgs{Action: ActDescribe, Failed: true, JSON: true}, ""},
		{"describe one", []string{"--describe", "--mirror", "dr"}, &MirrorsArgs{Action: ActDescribe, Mirror: "dr"}, ""},
		{"create", []string{"--create", "--mirror", "dr", "--mirror-config", "m.properties", "--command-config", "c.properties"},
			&MirrorsArgs{Action: ActCreate, Mirror: "dr", MirrorConfig: "m.properties", CommandConfig: "c.properties"}, ""},
		{"add names", []string{"--add", "--mirror", "dr", "--topics", "a,b"},
			&MirrorsArgs{Action: ActAdd, Mirror: "dr", Topics: TopicSelection{Names: []string{"a", "b"}}}, ""},
		{"add pattern exclude names", []string{"--add", "--mirror", "dr", "--topics", "a.*", "--exclude", "a.b,a-c"},
			&MirrorsArgs{Action: ActAdd, Mirror: "dr", Topics: TopicSelection{Pattern: "a.*"}, Exclude: []string{`a\.b`, "a-c"}}, ""},
		{"add pattern exclude pattern", []string{"--add", "--mirror", "dr", "--topics", "a.*", "--exclude", "a-(x|y)"},
			&MirrorsArgs{Action: ActAdd, Mirror: "dr", Topics: TopicSelection{Pattern: "a.*"}, Exclude: []string{"a-(x|y)"}}, ""},
		{"remove wait timeout", []string{"--remove", "--mirror", "dr", "--topics", "a", "--wait", "--timeout=2m"},
			&MirrorsArgs{Action: ActRemove, Mirror: "dr", Topics: TopicSelection{Names: []string{"a"}}, Wait: true, Timeout: 2 * time.Minute}, ""},
		{"remove wait for sync implies wait", []string{"--remove", "--mirror", "dr", "--topics", "a,b", "--wait-for-sync"},
			&MirrorsArgs{Action: ActRemove, Mirror: "dr", Topics: TopicSelection{Names: []string{"a", "b"}}, Wait: true, WaitForSync: true}, ""},
		{"remove wait for sync and wait", []string{"--remove", "--mirror", "dr", "--topics", "a", "--wait", "--wait-for-sync", "--timeout", "5m"},
			&MirrorsArgs{Action: ActRemove, Mirror: "dr", Topics: TopicSelection{Names: []string{"a"}}, Wait: true, WaitForSync: true, Timeout: 5 * time.Minute}, ""},
		{"pause", []string{"--pause", "--mirror", "dr", "--topics", "a"}, &MirrorsArgs{Action: ActPause, Mirror: "dr", Topics: TopicSelection{Names: []string{"a"}}}, ""},
		{"resume", []string{"--resume", "--mirror", "dr", "--topics", "a"}, &MirrorsArgs{Action: ActResume, Mirror: "dr", Topics: TopicSelection{Names: []string{"a"}}}, ""},
		{"delete", []string{"--delete", "--mirror", "dr"}, &MirrorsArgs{Action: ActDelete, Mirror: "dr"}, ""},
		{"recover state", []string{"--recover-state", "--mirror", "dr", "--mirror-config", "m.properties"},
			&MirrorsArgs{Action: ActRecoverState, Mirror: "dr", MirrorConfig: "m.properties"}, ""},
		{"recover state without config", []string{"--recover-state", "--mirror", "dr"}, nil, "--recover-state needs --mirror-config FILE"},
		{"recover state without mirror", []string{"--recover-state", "--mirror-config", "f"}, nil, "--recover-state needs --mirror NAME"},
		{"recover state with topics", []string{"--recover-state", "--mirror", "dr", "--mirror-config", "f", "--topics", "a"}, nil, "--topics does not apply to --recover-state"},

		{"no action", nil, nil, "no action given; give exactly one of --create"},
		{"two actions", []string{"--list", "--describe"}, nil, "--list and --describe given together"},
		{"unknown flag", []string{"--list", "--topic", "x"}, nil, "flag provided but not defined: -topic (did you mean --topics?); run 'kmirror mirrors -h'"},
		{"misspelt flag", []string{"--list", "--bootstrap-sever", "x"}, nil, "(did you mean --bootstrap-server?)"},
		{"missing value", []string{"--describe", "--mirror"}, nil, "flag needs an argument: -mirror"},
		{"stray argument", []string{"--list", "dr"}, nil, `unexpected argument "dr"`},
		{"create without mirror", []string{"--create", "--mirror-config", "f"}, nil, "--create needs --mirror NAME"},
		{"create without config", []string{"--create", "--mirror", "dr"}, nil, "--create needs --mirror-config FILE"},
		{"add without topics", []string{"--add", "--mirror", "dr"}, nil, "--add needs --topics"},
		{"add bad regex", []string{"--add", "--mirror", "dr", "--topics", "a(b"}, nil, "does not compile"},
		{"exclude with names", []string{"--add", "--mirror", "dr", "--topics", "a,b", "--exclude", "b"}, nil, "--exclude only narrows a --topics pattern"},
		{"exclude with remove", []string{"--remove", "--mirror", "dr", "--topics", "a", "--exclude", "b"}, nil, "--exclude does not apply to --remove (it is used with --add)"},
		{"pause pattern", []string{"--pause", "--mirror", "dr", "--topics", "a.*"}, nil, "--pause takes topic names, not a pattern"},
		{"wait with add", []string{"--add", "--mirror", "dr", "--topics", "a", "--wait"}, nil, "--wait does not apply to --add"},
		{"failed with list", []string{"--list", "--failed"}, nil, "--failed does not apply to --list"},
		{"topics with describe", []string{"--describe", "--topics", "a"}, nil, "--topics does not apply to --describe"},
		{"mirror with list", []string{"--list", "--mirror", "dr"}, nil, "--mirror does not apply to --list"},
		{"mirror-config with add", []string{"--add", "--mirror", "dr", "--topics", "a", "--mirror-config", "f"}, nil, "--mirror-config does not apply to --add"},
		{"empty mirror", []string{"--describe", "--mirror", ""}, nil, "--mirror is empty"},
		{"delete without mirror", []string{"--delete"}, nil, "--delete needs --mirror NAME"},
		{"bad timeout", []string{"--list", "--timeout", "0s"}, nil, "--timeout 0s must be positive"},
		{"wait for sync without remove", []string{"--describe", "--wait-for-sync"}, nil, "--wait-for-sync does not apply to --describe (it is used with --remove)"},
		{"wait for sync with pause", []string{"--pause", "--mirror", "dr", "--topics", "a", "--wait-for-sync"}, nil, "--wait-for-sync does not apply to --pause"},
		{"wait for sync with a pattern", []string{"--remove", "--mirror", "dr", "--topics", "a.*", "--wait-for-sync"}, nil,
			"--wait-for-sync takes topic names, not a pattern"},
		{"wait for sync, negative timeout", []string{"--remove", "--mirror", "dr", "--topics", "a", "--wait-for-sync", "--timeout", "-5s"}, nil,
			"--timeout -5s must be positive"},
		{"wait for sync, timeout without unit", []string{"--remove", "--mirror", "dr", "--topics", "a", "--wait-for-sync", "--timeout", "60"}, nil,
			`invalid value "60" for flag -timeout`},
		{"wait for sync without topics", []string{"--remove", "--mirror", "dr", "--wait-for-sync"}, nil, "--remove needs --topics"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseMirrorsArgs(append(append([]string{}, bs...), tc.args...), &bytes.Buffer{})
			if tc.err != "" {
				if err == nil || !IsUsage(err) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want usage error containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.want.Bootstrap = "proxy:9092"
			if tc.want.Timeout == 0 {
				tc.want.Timeout = 60 * time.Second
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestParseMirrorsArgsNeedsBootstrapAndHelps(t *testing.T) {
	_, err := ParseMirrorsArgs([]string{"--list"}, &bytes.Buffer{})
	if err == nil || !IsUsage(err) || !strings.Contains(err.Error(), "--bootstrap-server is required") {
		t.Fatalf("no bootstrap: %v", err)
	}
	var help bytes.Buffer
	if _, err := ParseMirrorsArgs([]string{"-h"}, &help); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	for _, want := range []string{"--create --mirror M --mirror-config FILE", "--describe [--mirror M] [--failed] [--json]", "ONE regular expression", "Exit status",
		"--wait-for-sync [--timeout D]", "no source transaction is open", "nothing is sent", "CreateTime, set\n        by the producer"} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("help lacks %q", want)
		}
	}
}

func TestParseDumpStateArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"--bootstrap-server", "b:9092"}, ""},
		{[]string{"--bootstrap-server", "b:9092", "--topic", "x", "--json", "--timeout", "5s"}, ""},
		{[]string{"--segment", "f.log", "--partition", "3"}, ""},
		{nil, "nothing to read: give --bootstrap-server"},
		{[]string{"--bootstrap-server", "b", "--segment", "f"}, "given together"},
		{[]string{"--segment", "f", "--topic", "x"}, "--topic applies to reading the topic"},
		{[]string{"--bootstrap-server", "b", "--partition", "1"}, "--partition applies to --segment"},
		{[]string{"f.log"}, `unexpected argument "f.log": give a segment file with --segment FILE`},
		{[]string{"--bootstrap-server", "b", "--timeout", "-1s"}, "must be positive"},
	} {
		_, err := ParseDumpStateArgs(tc.args, &bytes.Buffer{})
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.args, err)
		case tc.err != "" && (err == nil || !IsUsage(err) || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want usage error containing %q", tc.args, err, tc.err)
		}
	}
}
