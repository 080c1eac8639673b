package properties

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseProperties(t *testing.T) {
	text := "# comment\n! also a comment\n\n" +
		"security.protocol=SASL_SSL\n" +
		"  sasl.mechanism : SCRAM-SHA-512  \n" +
		"client.id kmirror-ops\n" +
		"sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n" +
		"    username=\"alice\" \\\n" +
		"    password=\"s3cr=t\";\n" +
		"path=C:\\\\kafka\\\\ca.pem\n" +
		"key\\=with\\:seps=v\\u00e9\r\n" +
		"empty=\n"
	got, err := Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	want := []Property{
		{"security.protocol", "SASL_SSL", 4},
		{"sasl.mechanism", "SCRAM-SHA-512", 5},
		{"client.id", "kmirror-ops", 6},
		{"sasl.jaas.config", `org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="s3cr=t";`, 7},
		{"path", `C:\kafka\ca.pem`, 10},
		{"key=with:seps", "vé", 11},
		{"empty", "", 12},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
}

func TestParsePropertiesErrors(t *testing.T) {
	for in, want := range map[string]string{
		"a=1\na=2\n":  "line 2: a is already set on line 1",
		"=value\n":    "line 1: empty key",
		"a=\\u12\n":   `malformed \u escape`,
		"a=\\uZZZZ\n": `malformed \u escape`,
	} {
		if _, err := Parse(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", in, err, want)
		}
	}
}
