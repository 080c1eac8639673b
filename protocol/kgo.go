package protocol

import "github.com/twmb/franz-go/pkg/kversion"

// KgoMaxVersions returns the table to pass to kgo.MaxVersions so that a
// kgo.Client can send the mirror RPCs: base (kversion.Stable() if nil) plus
// every mirror key at its maximum version.
//
// Without it kgo refuses every mirror request before it reaches the wire
// ("request key is unknown"): kgo only sends keys its max-versions table
// lists, and its default table lists none of the mirror keys except 94,
// which it knows as Kafka's UnregisterController.
func KgoMaxVersions(base *kversion.Versions) *kversion.Versions {
	if base == nil {
		base = kversion.Stable()
	}
	vs := new(kversion.Versions)
	base.EachMaxKeyVersion(vs.SetMaxKeyVersion)
	for _, api := range mirrorAPIs {
		vs.SetMaxKeyVersion(api.Key, api.MaxVersion)
	}
	return vs
}
