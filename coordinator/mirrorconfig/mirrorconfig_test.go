package mirrorconfig

import (
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	ok := map[string]string{"bootstrap.servers": "src:9092", "topics.include": "orders.*, payments", "fetch.max.bytes": "2097152"}
	if err := Validate(ok); err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
	for _, v := range []string{"0", "1024"} { // 0: derived from the copy buffer
		if err := Validate(map[string]string{"bootstrap.servers": "s:1", "fetch.response.max.bytes": v}); err != nil {
			t.Errorf("fetch.response.max.bytes=%s refused: %v", v, err)
		}
	}
	for name, tc := range map[string]struct {
		cfg  map[string]string
		want string
	}{
		"unknown key named":  {map[string]string{"bootstrap.servers": "s:1", "bootstrap.server": "x"}, `unknown mirror config "bootstrap.server"`},
		"missing bootstrap":  {map[string]string{}, "bootstrap.servers is required"},
		"not a number":       {map[string]string{"bootstrap.servers": "s:1", "fetch.max.bytes": "lots"}, "fetch.max.bytes=\"lots\": not a whole number"},
		"below minimum":      {map[string]string{"bootstrap.servers": "s:1", "fetch.max.bytes": "1"}, "must be at least 1024"},
		"response too small": {map[string]string{"bootstrap.servers": "s:1", "fetch.response.max.bytes": "1023"}, "must be 0 (derived) or at least 1024"},
		"bad regex":          {map[string]string{"bootstrap.servers": "s:1", "topics.include": "a("}, "invalid regex"},
		"bad enum":           {map[string]string{"bootstrap.servers": "s:1", "security.protocol": "TLS"}, "must be one of"},
		"sasl needs user":    {map[string]string{"bootstrap.servers": "s:1", "security.protocol": "SASL_SSL"}, "needs sasl.username"},
		"bad acl rule":       {map[string]string{"bootstrap.servers": "s:1", "acls.include": "TOPIC;orders.*,CLUSTER"}, `mirror config acls.include="TOPIC;orders.*,CLUSTER": rule "CLUSTER": CLUSTER ACLs are never synced`},
		"bad acl regex":      {map[string]string{"bootstrap.servers": "s:1", "acls.include": "GROUP;g(;READ"}, `acls.include="GROUP;g(;READ": rule "GROUP;g(;READ": resource name: invalid regex`},
		"secret not echoed":  {map[string]string{"bootstrap.servers": "s:1", "sasl.password": "hunter2", "failed.retry.max.attempts": "-1"}, "failed.retry.max.attempts"},
	} {
		err := Validate(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to contain %q", name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: error shows a secret: %v", name, err)
		}
	}
}

func TestParseDefaultsAndMatcher(t *testing.T) {
	c := Parse(map[string]string{"bootstrap.servers": "a:1,b:2", "topics.include": "orders.*,__internal", "failed.retry.max.attempts": "7"})
	if len(c.Bootstrap) != 2 || c.FetchMaxBytes != 1<<20 || c.FetchMaxWait != 500*time.Millisecond || c.RetryMaxAttempts != 7 {
		t.Fatalf("parsed %+v", c)
	}
	for name, want := range map[string]bool{"orders": true, "orders-eu": true, "payments": false, "__internal": false, "xorders": false} {
		if got := c.TopicsInclude.Match(name); got != want {
			t.Errorf("Match(%q) = %v, want %v (exclude __.* wins, whole-name match)", name, got, want)
		}
	}
	if got := RefreshInterval(map[string]string{"metadata.refresh.interval.ms": "1500"}); got != 1500*time.Millisecond || RefreshInterval(nil) != c.RefreshInterval {
		t.Fatalf("refresh interval %s, default %s", got, RefreshInterval(nil))
	}
	if len(c.ACLsInclude) != 0 {
		t.Fatalf("ACLs are synced by default: %v", c.ACLsInclude)
	}
	if !c.TopicPropertyExcluded["min.insync.replicas"] || c.TopicPropertyExcluded["retention.ms"] {
		t.Fatalf("topic property exclusions %v", c.TopicPropertyExcluded)
	}
}

func TestIsSecretIsTheOneList(t *testing.T) {
	for _, k := range []string{"sasl.password", "sasl.jaas.config", "ssl.key.password", "ssl.keystore.password", "ssl.truststore.password",
		"ssl.keystore.key", "future.client.password", "oauth.client.secret", "SASL.PASSWORD", "future.oauth.token"} {
		if !IsSecret(k) {
			t.Errorf("%s is not secret", k)
		}
	}
	for _, k := range Keys() {
		if IsSecret(k) != (k == "sasl.password") {
			t.Errorf("mirror config %s: secret %v", k, IsSecret(k))
		}
	}
}

// The one-key readers the hot loops use read what Parse reads: the mirror's valid value,
// else the default.
func TestOneKeyReadersAgreeWithParse(t *testing.T) {
	for _, configs := range []map[string]string{
		{"bootstrap.servers": "b:9092"},
		{"bootstrap.servers": "b:9092", "failed.retry.initial.backoff.ms": "250", "failed.retry.max.backoff.ms": "9000",
			"failed.retry.max.attempts": "99999", "replication.throttled.rate": "1048576", "metadata.refresh.interval.ms": "1234"},
		{"bootstrap.servers": "b:9092", "failed.retry.initial.backoff.ms": "soon", "failed.retry.max.attempts": "-3",
			"replication.throttled.rate": "lots", "metadata.refresh.interval.ms": ""},
	} {
		c := Parse(configs)
		if got := Millis(configs, "failed.retry.initial.backoff.ms"); got != c.RetryInitialBackoff {
			t.Errorf("%v: initial backoff %v, Parse %v", configs, got, c.RetryInitialBackoff)
		}
		if got := Millis(configs, "failed.retry.max.backoff.ms"); got != c.RetryMaxBackoff {
			t.Errorf("%v: max backoff %v, Parse %v", configs, got, c.RetryMaxBackoff)
		}
		if got := int16(min(Number(configs, "failed.retry.max.attempts"), 32767)); got != c.RetryMaxAttempts {
			t.Errorf("%v: max attempts %v, Parse %v", configs, got, c.RetryMaxAttempts)
		}
		if got := Number(configs, "replication.throttled.rate"); got != c.ThrottledRate {
			t.Errorf("%v: throttled rate %v, Parse %v", configs, got, c.ThrottledRate)
		}
		if got := RefreshInterval(configs); got != c.RefreshInterval {
			t.Errorf("%v: refresh interval %v, Parse %v", configs, got, c.RefreshInterval)
		}
		if got := Value(configs, "security.protocol"); got != c.SecurityProtocol {
			t.Errorf("%v: security.protocol %q, Parse %q", configs, got, c.SecurityProtocol)
		}
	}
}

// What a partition worker's event cost in config reading before (Parse) and after (the
// three retry keys): bench/README.md's architecture section.
func BenchmarkRetryKeys(b *testing.B) {
	configs := map[string]string{"bootstrap.servers": "b:9092", "topics.include": "orders.*,payments", "groups.include": ".*"}
	b.Run("Parse", func(b *testing.B) {
		for b.Loop() {
			_ = Parse(configs).RetryMaxAttempts
		}
	})
	b.Run("keys", func(b *testing.B) {
		for b.Loop() {
			_ = Millis(configs, "failed.retry.initial.backoff.ms") + Millis(configs, "failed.retry.max.backoff.ms")
			_ = Number(configs, "failed.retry.max.attempts")
		}
	})
}
