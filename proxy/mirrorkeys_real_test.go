package proxy

import (
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/enforcement"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/protocol"
)

// TestRealApiVersionsKeys: ApiVersions through kmirror lists the real broker's keys unchanged
// (minus what docs/proxy.md says the proxy drops or caps) and kmirror's range, with no
// overlap; a Kafka key just below the old mirror range (the broker's highest the proxy does
// not decode) reaches the broker and gets the broker's own answer.
func TestRealApiVersionsKeys(t *testing.T) {
	// A one-broker cluster of its own: every broker of a cluster runs the same software, and
	// one JVM starts where three time out on a loaded machine.
	c := kafkatest.Start(t)
	d := newLeakDetector(c.Bootstrap())
	p := startProxyWith(t, c.Bootstrap(), []Option{d.option()})
	t.Cleanup(func() { d.check(t) })
	req := kmsg.NewPtrApiVersionsRequest()
	req.ClientSoftwareName, req.ClientSoftwareVersion = "test", "1"
	direct := rawConn(t, c.Bootstrap()[0], req).(*kmsg.ApiVersionsResponse)
	proxied := rawConn(t, p.Addr(), req).(*kmsg.ApiVersionsResponse)
	if direct.ErrorCode != 0 || proxied.ErrorCode != 0 {
		t.Fatalf("ApiVersions errors: direct %d, through kmirror %d", direct.ErrorCode, proxied.ErrorCode)
	}
	through := map[int16]kmsg.ApiVersionsResponseApiKey{}
	for _, k := range proxied.ApiKeys {
		through[k.ApiKey] = k
	}
	broker := map[int16]kmsg.ApiVersionsResponseApiKey{}
	var capped, dropped []string
	highestPlain := int16(-1) // the broker's highest key the proxy forwards byte for byte
	for _, b := range direct.ApiKeys {
		broker[b.ApiKey] = b
		if protocol.MirrorKeyIndex(b.ApiKey) >= 0 {
			t.Errorf("Kafka %s advertises key %d, inside kmirror's range %s", "4.3", b.ApiKey, protocol.MirrorKeyRange())
		}
		k, ok := through[b.ApiKey]
		if kmsgMaxVersion(b.ApiKey) < 0 { // documented: a key kmsg does not know is dropped
			if ok {
				t.Errorf("key %d, unknown to kmsg, advertised through kmirror: %+v", b.ApiKey, k)
			}
			dropped = append(dropped, kmsg.NameForKey(b.ApiKey))
			continue
		}
		want := b
		if (decodedKey(b.ApiKey) || versionCaps[b.ApiKey] != 0) && want.MaxVersion > maxVersion(b.ApiKey) {
			want.MaxVersion = maxVersion(b.ApiKey) // documented: capped at what the proxy decodes
			capped = append(capped, kmsg.NameForKey(b.ApiKey))
		}
		if !ok || k.MinVersion != want.MinVersion || k.MaxVersion != want.MaxVersion {
			t.Errorf("%s (%d): broker v%d..v%d, through kmirror %+v (present %v), want v%d..v%d",
				kmsg.NameForKey(b.ApiKey), b.ApiKey, b.MinVersion, b.MaxVersion, k, ok, want.MinVersion, want.MaxVersion)
		}
		if !decodedKey(b.ApiKey) && !enforcement.AdminKeys[b.ApiKey] && b.ApiKey > highestPlain {
			highestPlain = b.ApiKey
		}
	}
	for _, k := range proxied.ApiKeys {
		if _, ok := broker[k.ApiKey]; !ok && protocol.MirrorKeyIndex(k.ApiKey) < 0 {
			t.Errorf("kmirror advertises key %d, which is neither the broker's nor a mirror key", k.ApiKey)
		}
	}
	for _, api := range protocol.MirrorAPIs() {
		if k, ok := through[api.Key]; !ok || k.MinVersion != api.MinVersion || k.MaxVersion != api.MaxVersion {
			t.Errorf("mirror key %d (%s) advertised as %+v (present %v)", api.Key, api.Name, k, ok)
		}
	}
	_, has94 := broker[94]
	t.Logf("broker: %d keys, highest %d, UnregisterController (94) advertised: %v; through kmirror: %d keys; capped: %v; dropped: %v",
		len(direct.ApiKeys), direct.ApiKeys[len(direct.ApiKeys)-1].ApiKey, has94, len(proxied.ApiKeys), capped, dropped)

	// The broker's highest plainly forwarded key reaches it: the answer through kmirror is
	// the broker's own (the same request straight to the broker gets the same answer).
	if highestPlain < 0 {
		t.Fatal("the broker advertises no key the proxy forwards byte for byte")
	}
	fwd := kmsg.RequestForKey(highestPlain)
	fwd.SetVersion(min(broker[highestPlain].MaxVersion, kmsgMaxVersion(highestPlain)))
	want := rawConn(t, c.Bootstrap()[0], fwd)
	got := rawConn(t, p.Addr(), fwd)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s v%d through kmirror %+v, straight to the broker %+v", kmsg.NameForKey(highestPlain), fwd.GetVersion(), got, want)
	}
	t.Logf("%s (%d) v%d through kmirror: %+v", kmsg.NameForKey(highestPlain), highestPlain, fwd.GetVersion(), got)
}
