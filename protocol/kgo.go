package protocol

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// KgoMaxVersions returns the table to pass to kgo.MaxVersions so that a
// kgo.Client can send the mirror RPCs: base (kversion.Stable() if nil) plus
// every mirror key at its maximum version.
//
// Without it kgo refuses every mirror request before it reaches the wire
// ("request key is unknown"): kgo only sends keys its max-versions table
// lists, and its default table lists none of the mirror keys. kgo also sends
// a key only to a server whose ApiVersions answer lists it, so a client built
// this way never sends a mirror RPC to a server that does not advertise it.
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

// ErrNotMirrorServer is wrapped by CheckMirrorAPIs' error: the server does
// not advertise kmirror's mirror RPCs at the keys this build uses.
var ErrNotMirrorServer = errors.New("this server does not serve kmirror's mirror RPCs")

// CheckMirrorAPIs checks an ApiVersions answer for every mirror RPC at a
// version this package speaks. The keys are what a client finds in the
// answer, so an older or newer kmirror with other keys, or a plain Kafka
// broker, is told apart from a kmirror before any mirror request is sent
// (whose answer would otherwise fail to decode).
func CheckMirrorAPIs(keys []kmsg.ApiVersionsResponseApiKey) error {
	advertised := make(map[int16]kmsg.ApiVersionsResponseApiKey, len(keys))
	highest := int16(-1)
	for _, k := range keys {
		advertised[k.ApiKey] = k
		highest = max(highest, k.ApiKey)
	}
	var missing []string
	for _, api := range mirrorAPIs {
		k, ok := advertised[api.Key]
		switch {
		case !ok:
			missing = append(missing, fmt.Sprintf("%s (%d)", api.Name, api.Key))
		case k.MinVersion > api.MaxVersion || k.MaxVersion < api.MinVersion:
			missing = append(missing, fmt.Sprintf("%s (%d) at v%d..v%d, advertised v%d..v%d",
				api.Name, api.Key, api.MinVersion, api.MaxVersion, k.MinVersion, k.MaxVersion))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	// Keys Kafka (as kmsg knows it) does not have hint at another kmirror
	// version, e.g. 95..104 from kmirror builds before the move to 1000.
	var foreign []int16
	for k := range advertised {
		if kmsg.RequestForKey(k) == nil && !IsMirrorKey(k) {
			foreign = append(foreign, k)
		}
	}
	slices.Sort(foreign)
	hint := fmt.Sprintf("its highest API key is %d", highest)
	if len(foreign) > 0 {
		hint += fmt.Sprintf("; keys it advertises that Kafka does not have: %v", foreign)
	}
	return fmt.Errorf("%w at keys %s; it is not kmirror or a different version: missing %s (%s)",
		ErrNotMirrorServer, MirrorKeyRange(), strings.Join(missing, ", "), hint)
}

// ProbeMirrorAPIs asks the server behind cl for its ApiVersions and checks it
// with CheckMirrorAPIs. Failing to get an answer at all is returned as is.
func ProbeMirrorAPIs(ctx context.Context, cl *kgo.Client) error {
	req := kmsg.NewPtrApiVersionsRequest()
	req.ClientSoftwareName = "kmirror"
	req.ClientSoftwareVersion = "0"
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("asking for ApiVersions: %w", err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return fmt.Errorf("ApiVersions answer: %w", err)
	}
	return CheckMirrorAPIs(resp.ApiKeys)
}
