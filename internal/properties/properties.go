// Package properties reads Java properties files, the format of Kafka's
// client configs (--command-config, --mirror-config) and of the files the
// ${file:PATH:KEY} config provider points at.
package properties

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Property is one key=value line of a Java properties file, with the line it
// started on for error messages.
type Property struct {
	Key, Value string
	Line       int
}

// Read reads a Java properties file (the format of Kafka's
// --command-config and client config files).
func Read(path string) ([]Property, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	props, err := Parse(string(raw))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return props, nil
}

// Parse parses the subset of java.util.Properties that real config
// files use: '#' and '!' comments, '=', ':' or white space between key and
// value, a trailing backslash continuing a logical line (leading white space
// of the next line is dropped, as sasl.jaas.config files rely on), and the
// escapes \t \n \r \f \uXXXX and backslash-anything. A key given twice is an
// error: Java would silently keep the last one, which hides typos.
func Parse(text string) ([]Property, error) {
	lines := strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	var out []Property
	seen := map[string]int{}
	for i := 0; i < len(lines); i++ {
		start := i + 1
		line := strings.TrimLeft(lines[i], " \t\f")
		if line == "" || line[0] == '#' || line[0] == '!' {
			continue
		}
		// Join continuation lines: an odd number of trailing backslashes.
		if endsWithContinuation(line) {
			var b strings.Builder
			for endsWithContinuation(line) && i+1 < len(lines) {
				b.WriteString(line[:len(line)-1])
				i++
				line = strings.TrimLeft(lines[i], " \t\f")
			}
			if endsWithContinuation(line) {
				line = line[:len(line)-1]
			}
			b.WriteString(line)
			line = b.String()
		}
		key, value, err := splitProperty(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", start, err)
		}
		if key == "" {
			return nil, fmt.Errorf("line %d: empty key in %q", start, line)
		}
		if first, dup := seen[key]; dup {
			return nil, fmt.Errorf("line %d: %s is already set on line %d; keep one of them", start, key, first)
		}
		seen[key] = start
		out = append(out, Property{Key: key, Value: value, Line: start})
	}
	return out, nil
}

func endsWithContinuation(s string) bool {
	n := 0
	for i := len(s) - 1; i >= 0 && s[i] == '\\'; i-- {
		n++
	}
	return n%2 == 1
}

// splitProperty splits a logical line into its unescaped key and value.
func splitProperty(line string) (string, string, error) {
	keyEnd := len(line)
	for i := 0; i < len(line); i++ {
		c := line[i]
		if c == '\\' {
			i++
			continue
		}
		if c == '=' || c == ':' || c == ' ' || c == '\t' || c == '\f' {
			keyEnd = i
			break
		}
	}
	rest := line[keyEnd:]
	rest = strings.TrimLeft(rest, " \t\f")
	if rest != "" && (rest[0] == '=' || rest[0] == ':') {
		rest = strings.TrimLeft(rest[1:], " \t\f")
	}
	key, err := unescape(line[:keyEnd])
	if err != nil {
		return "", "", err
	}
	value, err := unescape(rest)
	if err != nil {
		return "", "", err
	}
	return key, strings.TrimRight(value, " \t\f"), nil
}

func unescape(s string) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 == len(s) {
			b.WriteByte(c)
			continue
		}
		i++
		switch s[i] {
		case 't':
			b.WriteByte('\t')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 'f':
			b.WriteByte('\f')
		case 'u':
			if i+5 > len(s) {
				return "", fmt.Errorf(`malformed \u escape in %q: want \uXXXX`, s)
			}
			r, err := strconv.ParseUint(s[i+1:i+5], 16, 32)
			if err != nil {
				return "", fmt.Errorf(`malformed \u escape in %q: want \uXXXX`, s)
			}
			b.WriteRune(rune(r))
			i += 4
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String(), nil
}
