package mirrorcli

// Mirrors as code: the file `kmirror mirrors --apply/--diff -f FILE` reads
// and `--export` writes (docs/mirrors-as-code.md). It declares mirrors, their
// configs and their topics; what would take data away from the mirrors
// (pausing, failing over, deleting) is written out explicitly, never
// implied by something missing from the file.

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/kmirror/kmirror/coordinator/mirrorconfig"
	"github.com/kmirror/kmirror/coordinator/secrets"
)

// MirrorsFile is a parsed mirrors file.
type MirrorsFile struct {
	Mirrors []MirrorSpec `yaml:"mirrors"`
}

// MirrorSpec is one mirror as a file declares it.
type MirrorSpec struct {
	Name string `yaml:"name"`
	// Configs are the mirror configs (--mirror-config's keys). Secrets are
	// references (${file:PATH:KEY}, ${env:NAME}, ${directory:DIR:FILE}),
	// never values: the file is meant for review and version control.
	Configs map[string]string `yaml:"configs,omitempty"`
	// Topics are mirrored (added when missing).
	Topics []string `yaml:"topics,omitempty"`
	// Patterns are the topics.include config written as a list: source
	// topics matching one are mirrored, also ones created later.
	Patterns []string `yaml:"patterns,omitempty"`
	// Paused topics are paused (destructive: copying stops); a paused topic
	// of Topics that is not listed here is resumed.
	Paused []string `yaml:"paused,omitempty"`
	// FailedOver topics are failed over (destructive: they stop mirroring
	// for good and become writable).
	FailedOver []string `yaml:"failed_over,omitempty"`
	// Deleted deletes the mirror (destructive), failing its topics over.
	Deleted bool `yaml:"deleted,omitempty"`
}

// FileError is a problem with a mirrors file at a line.
type FileError struct {
	File string
	Line int
	Msg  string
}

func (e *FileError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// yamlLineRE finds the line yaml.v3 names in its errors ("yaml: line 3: ...").
var yamlLineRE = regexp.MustCompile(`^(?:yaml: )?line (\d+): `)

// ParseMirrorsFile parses and checks a mirrors file; name is used in errors.
func ParseMirrorsFile(name string, data []byte) (*MirrorsFile, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, yamlError(name, err)
	}
	if len(doc.Content) == 0 {
		return nil, &FileError{File: name, Msg: "the file is empty; it needs a mirrors: list (kmirror mirrors --export writes one for what exists)"}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true) // a misspelt key must not be ignored silently
	var f MirrorsFile
	if err := dec.Decode(&f); err != nil {
		return nil, yamlError(name, err)
	}
	lines := fileLines{name: name, root: doc.Content[0]}
	if err := f.check(lines); err != nil {
		return nil, err
	}
	return &f, nil
}

// yamlError keeps yaml.v3's line number and drops its prefixes.
func yamlError(name string, err error) error {
	var te *yaml.TypeError
	msg := err.Error()
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg = te.Errors[0]
	}
	msg = strings.TrimPrefix(msg, "yaml: ")
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		var line int
		fmt.Sscan(m[1], &line)
		return &FileError{File: name, Line: line, Msg: msg[len(m[0]):]}
	}
	return &FileError{File: name, Msg: msg}
}

// fileLines finds the line of a place in the file for error messages.
type fileLines struct {
	name string
	root *yaml.Node
}

// at returns the node at path (mapping keys and sequence indexes); the
// deepest node found when the path does not go all the way.
func (l fileLines) at(path ...any) *yaml.Node {
	n := l.root
	for _, p := range path {
		next := child(n, p)
		if next == nil {
			return n
		}
		n = next
	}
	return n
}

func child(n *yaml.Node, p any) *yaml.Node {
	switch p := p.(type) {
	case int:
		if n.Kind == yaml.SequenceNode && p < len(n.Content) {
			return n.Content[p]
		}
	case string:
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == p {
					return n.Content[i+1]
				}
			}
		}
	}
	return nil
}

func (l fileLines) errorf(path []any, format string, args ...any) error {
	return &FileError{File: l.name, Line: l.at(path...).Line, Msg: fmt.Sprintf(format, args...)}
}

func (f *MirrorsFile) check(l fileLines) error {
	if len(f.Mirrors) == 0 {
		return l.errorf(nil, "no mirrors: the file needs a mirrors: list, each with a name and configs")
	}
	seen := map[string]int{}
	for i := range f.Mirrors {
		m := &f.Mirrors[i]
		if prev, dup := seen[m.Name]; dup && m.Name != "" {
			return l.errorf([]any{"mirrors", i, "name"}, "mirror %s is declared twice (also mirror #%d); keep one", m.Name, prev+1)
		}
		seen[m.Name] = i
		if err := m.check(l, []any{"mirrors", i}); err != nil {
			return err
		}
	}
	return nil
}

func (m *MirrorSpec) check(l fileLines, at []any) error {
	if strings.TrimSpace(m.Name) == "" {
		return l.errorf(at, "a mirror has no name; give name: NAME")
	}
	for _, list := range []struct {
		field string
		names []string
	}{{"topics", m.Topics}, {"paused", m.Paused}, {"failed_over", m.FailedOver}} {
		if err := checkTopicNames(l, append(at, list.field), list.names); err != nil {
			return err
		}
	}
	for i, p := range m.Patterns {
		if _, err := regexp.Compile("^(?:" + p + ")$"); err != nil {
			return l.errorf(append(at, "patterns", i), "mirror %s: pattern %q does not compile: %v", m.Name, p, err)
		}
	}
	for i, t := range m.FailedOver {
		if slices.Contains(m.Topics, t) || slices.Contains(m.Paused, t) {
			return l.errorf(append(at, "failed_over", i), "mirror %s: topic %s is both failed over and mirrored (topics or paused); a failed-over topic cannot mirror again, keep one", m.Name, t)
		}
	}
	for i, t := range m.Paused {
		if !slices.Contains(m.Topics, t) {
			return l.errorf(append(at, "paused", i), "mirror %s: paused topic %s is not in topics; list it there too", m.Name, t)
		}
	}
	if m.Deleted {
		return nil // a mirror to delete needs no configs
	}
	return m.checkConfigs(l, at)
}

func checkTopicNames(l fileLines, at []any, names []string) error {
	seen := map[string]bool{}
	for i, n := range names {
		if !topicNameRE.MatchString(n) || n == "." || n == ".." || len(n) > 249 {
			return l.errorf(append(at, i), "%q is not a topic name (a-z A-Z 0-9 . _ -, at most 249); a regular expression goes in patterns", n)
		}
		if seen[n] {
			return l.errorf(append(at, i), "topic %s is listed twice", n)
		}
		seen[n] = true
	}
	return nil
}

func (m *MirrorSpec) checkConfigs(l fileLines, at []any) error {
	cat := append(at, "configs")
	for _, k := range sortedKeys(m.Configs) {
		v := m.Configs[k]
		switch {
		case k == "sasl.jaas.config":
			return l.errorf(append(cat, k), "mirror %s: sasl.jaas.config holds a password; give sasl.username and sasl.password (as a reference) instead", m.Name)
		case k == "topics.include" && len(m.Patterns) > 0:
			return l.errorf(append(cat, k), "mirror %s: both patterns and configs topics.include are given; keep patterns", m.Name)
		case mirrorconfig.IsSecret(k) && !secrets.IsReference(v):
			return l.errorf(append(cat, k), "mirror %s: %s is a secret written in clear; a mirrors file is for review and version control: give a reference, ${file:/PATH.properties:KEY}, ${env:NAME} or ${directory:DIR:FILE} (docs/SECURITY.md, \"Secrets\")", m.Name, k)
		case mirrorconfig.IsSecret(k):
			if _, err := secrets.ParseReference(v); err != nil {
				return l.errorf(append(cat, k), "mirror %s: %s: %v", m.Name, k, err)
			}
		}
	}
	if err := mirrorconfig.Validate(m.DesiredConfigs()); err != nil {
		return l.errorf(configLine(cat, m.Configs, err), "mirror %s: %v", m.Name, err)
	}
	return nil
}

// configLine points an error of mirrorconfig.Validate at the key it names
// (Validate names the first bad key), else at the configs.
func configLine(cat []any, configs map[string]string, err error) []any {
	for _, k := range sortedKeys(configs) {
		if strings.Contains(err.Error(), `"`+k+`"`) || strings.Contains(err.Error(), "config "+k+"=") {
			return append(cat, k)
		}
	}
	return cat
}

// DesiredConfigs are the mirror configs the file declares, patterns
// included as topics.include.
func (m *MirrorSpec) DesiredConfigs() map[string]string {
	out := make(map[string]string, len(m.Configs)+1)
	for k, v := range m.Configs {
		out[k] = v
	}
	if len(m.Patterns) > 0 {
		out["topics.include"] = strings.Join(m.Patterns, ",")
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// MarshalMirrorsFile writes f as YAML with a header saying what it is.
func MarshalMirrorsFile(f *MirrorsFile, header string) ([]byte, error) {
	var buf bytes.Buffer
	for _, line := range strings.Split(strings.TrimRight(header, "\n"), "\n") {
		buf.WriteString("# " + line + "\n")
	}
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(f); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
