package secrets

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/kmirror/kmirror/internal/properties"
)

// Reference is a parsed config provider reference, in the syntax of Kafka's
// config providers: ${file:PATH:KEY} (FileConfigProvider: KEY of the
// properties file PATH), ${env:NAME} (EnvVarConfigProvider) and
// ${directory:DIR:FILE} (DirectoryConfigProvider: the whole content of
// DIR/FILE). A reference is the whole value; text around it is not
// substituted, so that a secret is never half stored in clear.
type Reference struct {
	Provider string
	Path     string // file and directory
	Key      string // the properties key, variable name or file name
}

var referenceRE = regexp.MustCompile(`^\$\{([A-Za-z0-9_]+):([^}]*)\}$`)

// Providers are the config provider names kmirror resolves.
var Providers = []string{"file", "env", "directory"}

// IsReference reports whether v is meant as a provider reference (it has
// the ${NAME:...} form; ParseReference says whether it is a valid one).
func IsReference(v string) bool { return referenceRE.MatchString(v) }

// ParseReference parses a reference. The path ends at the last ':', so paths
// may hold colons; keys and variable names cannot.
func ParseReference(v string) (Reference, error) {
	m := referenceRE.FindStringSubmatch(v)
	if m == nil {
		return Reference{}, errors.New("not a config provider reference: want ${file:PATH:KEY}, ${env:NAME} or ${directory:DIR:FILE}")
	}
	r := Reference{Provider: m[1]}
	switch r.Provider {
	case "env":
		r.Key = m[2]
		if r.Key == "" || strings.ContainsAny(r.Key, "=\x00") {
			return Reference{}, fmt.Errorf("%s: want ${env:NAME} with the name of an environment variable", v)
		}
	case "file", "directory":
		i := strings.LastIndexByte(m[2], ':')
		if i <= 0 || i == len(m[2])-1 {
			return Reference{}, fmt.Errorf("%s: want ${%s:PATH:%s}", v, r.Provider, map[string]string{"file": "KEY", "directory": "FILE"}[r.Provider])
		}
		r.Path, r.Key = m[2][:i], m[2][i+1:]
		if r.Provider == "directory" && (r.Key != filepath.Base(r.Key) || r.Key == "." || r.Key == "..") {
			return Reference{}, fmt.Errorf("%s: FILE must be a file name inside DIR, not a path", v)
		}
	default:
		return Reference{}, fmt.Errorf("%s: unknown config provider %q; kmirror resolves %s", v, r.Provider, strings.Join(Providers, ", "))
	}
	return r, nil
}

// String is the reference as written.
func (r Reference) String() string {
	if r.Provider == "env" {
		return "${env:" + r.Key + "}"
	}
	return "${" + r.Provider + ":" + r.Path + ":" + r.Key + "}"
}

// env is where references read from; tests replace it.
type env struct {
	lookupEnv func(string) (string, bool)
	readFile  func(string) ([]byte, error)
}

var osEnv = env{lookupEnv: os.LookupEnv, readFile: os.ReadFile}

// resolve reads the referenced value. Errors say what is missing where, and
// never quote file content.
func (e env) resolve(r Reference) (string, error) {
	switch r.Provider {
	case "env":
		v, ok := e.lookupEnv(r.Key)
		if !ok {
			return "", fmt.Errorf("environment variable %s is not set", r.Key)
		}
		return v, nil
	case "directory":
		raw, err := e.readFile(filepath.Join(r.Path, r.Key))
		if err != nil {
			return "", err
		}
		return string(raw), nil
	case "file":
		raw, err := e.readFile(r.Path)
		if err != nil {
			return "", err
		}
		props, err := properties.Parse(string(raw))
		if err != nil {
			// The parser's message may quote a line, which may be a secret.
			return "", fmt.Errorf("%s is not a valid properties file", r.Path)
		}
		for _, p := range props {
			if p.Key == r.Key {
				return p.Value, nil
			}
		}
		return "", fmt.Errorf("%s has no key %s", r.Path, r.Key)
	}
	return "", fmt.Errorf("unknown config provider %q", r.Provider)
}
