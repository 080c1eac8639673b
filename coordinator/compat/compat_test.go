package compat

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// apiVersions is what a broker of release v answers, with transaction.version tv finalized
// (kversion knows every release's API versions).
func apiVersions(v *kversion.Versions, tv int16) *kmsg.ApiVersionsResponse {
	r := kmsg.NewPtrApiVersionsResponse()
	v.EachMaxKeyVersion(func(k, max int16) {
		r.ApiKeys = append(r.ApiKeys, kmsg.ApiVersionsResponseApiKey{ApiKey: k, MaxVersion: max})
	})
	if tv > 0 {
		r.FinalizedFeatures = append(r.FinalizedFeatures, kmsg.ApiVersionsResponseFinalizedFeature{Name: "transaction.version", MaxVersionLevel: tv, MinVersionLevel: tv})
	}
	return r
}

func cluster(v *kversion.Versions, tv int16) Cluster {
	return FromResponses([]*kmsg.ApiVersionsResponse{apiVersions(v, tv)})
}

func TestCheckPairs(t *testing.T) {
	for _, c := range []struct {
		name     string
		src, dst Cluster
		mode     Mode
		err      string
	}{
		{"4.0 to 4.0 with transaction.version 2", cluster(kversion.V4_0_0(), 2), cluster(kversion.V4_0_0(), 2), ModeExactlyOnce, ""},
		{"ZooKeeper-era 2.8 source to 4.0", cluster(kversion.V2_8_0(), 0), cluster(kversion.V4_0_0(), 2), ModeExactlyOnce, ""},
		{"3.9 destination: transaction.version 1", cluster(kversion.V3_6_0(), 0), cluster(kversion.V3_9_0(), 0), ModeTV1, ""},
		{"4.0 destination not upgraded to transaction.version 2", cluster(kversion.V4_0_0(), 2), cluster(kversion.V4_0_0(), 1), ModeTV1, ""},
		{"2.8 destination lacks DescribeTransactions", cluster(kversion.V3_6_0(), 0), cluster(kversion.V2_8_0(), 0), "", "destination cluster (Kafka 2.8) lacks DescribeTransactions"},
		{"0.10 source has no v2 batches", cluster(kversion.V0_10_2(), 0), cluster(kversion.V4_0_0(), 2), "", "source cluster (Kafka 0.10.2) lacks Fetch v5+"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := Check(c.src, c.dst)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("Check: %v, want an error with %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Mode != c.mode {
				t.Fatalf("mode %q, want %q", p.Mode, c.mode)
			}
		})
	}
}

// A cluster in a rolling upgrade is as able as its oldest broker.
func TestOldestBrokerNamesTheCluster(t *testing.T) {
	c := FromResponses([]*kmsg.ApiVersionsResponse{apiVersions(kversion.V4_0_0(), 2), apiVersions(kversion.V3_9_0(), 0)})
	if c.Release != "3.9" || c.TransactionVersion != 0 {
		t.Fatalf("release %q transaction.version %d, want 3.9 and 0", c.Release, c.TransactionVersion)
	}
	if v := c.maxVersions[0]; v != 11 {
		t.Fatalf("Produce max version %d, want 3.9's 11", v)
	}
	p, err := Check(c, c)
	if err != nil || p.Mode != ModeTV1 {
		t.Fatalf("Check: %v %q", err, p.Mode)
	}
	if s := p.String(); !strings.Contains(s, "destination Kafka 3.9 (transaction.version 0)") {
		t.Fatalf("String: %s", s)
	}
}

func TestCheckTopicFormat(t *testing.T) {
	for v, refused := range map[string]bool{"0.10.2": true, "0.10.2-IV0": true, "0.9.0": true, "0.8.2": true,
		"0.11.0": false, "2.8-IV1": false, "3.0": false, "": false} {
		err := CheckTopicFormat("orders", v)
		if (err != nil) != refused {
			t.Errorf("message.format.version=%q: %v, refused want %v", v, err, refused)
		}
		if err != nil && !strings.Contains(err.Error(), "--add-config message.format.version=") {
			t.Errorf("the refusal does not say what to do: %v", err)
		}
	}
}
