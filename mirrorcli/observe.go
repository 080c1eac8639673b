package mirrorcli

// What exists: the mirrors a proxy has, their configs and the state of
// their topics, as --apply, --diff and --export compare and write them.

import (
	"context"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/coordinator/mirrorconfig"
	"github.com/kmirror/kmirror/protocol"
)

// topicState is what a mirrors file can say of a topic.
type topicState int

const (
	topicMirroring  topicState = iota // mirroring, or FAILED and retried
	topicPaused                       // every partition PAUSED
	topicFailedOver                   // STOPPING or STOPPED
)

// mirrorConfig is one config of an existing mirror.
type mirrorConfig struct {
	value     string // the value in effect (the default when not set); "" for a secret
	set       bool   // set on the mirror, not a default
	sensitive bool   // a secret: the proxy never returns its value
}

// observedMirror is one existing mirror.
type observedMirror struct {
	name    string
	configs map[string]mirrorConfig
	topics  map[string]topicState
}

// observe reads every mirror of the proxy: names and topic states with one
// DescribeMirrors, configs with one DescribeConfigs.
func (r *runner) observe(ctx context.Context) (map[string]*observedMirror, error) {
	dr, err := r.describeOnce(ctx, nil)
	if err != nil {
		return nil, err
	}
	if errs := MirrorErrors(dr); len(errs) > 0 {
		return nil, fmt.Errorf("%s; nothing was compared", strings.Join(errs, "; "))
	}
	out := map[string]*observedMirror{}
	var names []string
	for _, m := range dr.Mirrors {
		om := &observedMirror{name: m.Name, configs: map[string]mirrorConfig{}, topics: map[string]topicState{}}
		for _, t := range m.Topics {
			om.topics[t.Name] = stateOfTopic(t)
		}
		out[m.Name] = om
		names = append(names, m.Name)
	}
	if len(names) == 0 {
		return out, nil
	}
	resources, err := r.mirrorConfigs(ctx, names)
	if err != nil {
		return nil, err
	}
	for _, rr := range resources {
		om := out[rr.ResourceName]
		if om == nil {
			continue
		}
		for _, c := range rr.Configs {
			mc := mirrorConfig{set: c.Source != kmsg.ConfigSourceDefaultConfig, sensitive: c.IsSensitive}
			if c.Value != nil {
				mc.value = *c.Value
			}
			om.configs[c.Name] = mc
		}
	}
	return out, nil
}

func stateOfTopic(t protocol.DescribeMirrorsResponseTopic) topicState {
	paused := len(t.Partitions) > 0
	for i := range t.Partitions {
		p := &t.Partitions[i]
		if p.FailingOver() {
			return topicFailedOver
		}
		paused = paused && p.State == protocol.MirrorStatePaused.String()
	}
	if paused {
		return topicPaused
	}
	return topicMirroring
}

// mirrorConfigs reads the configs of the named mirrors (resource type 64,
// answered by the proxy); a mirror the proxy cannot describe is an error.
func (r *runner) mirrorConfigs(ctx context.Context, names []string) ([]kmsg.DescribeConfigsResponseResource, error) {
	req := kmsg.NewPtrDescribeConfigsRequest()
	for _, n := range names {
		res := kmsg.NewDescribeConfigsRequestResource()
		res.ResourceType, res.ResourceName = mirrorResourceType, n
		req.Resources = append(req.Resources, res)
	}
	resp, err := r.c.request(ctx, req)
	if err != nil {
		return nil, err
	}
	resources := resp.(*kmsg.DescribeConfigsResponse).Resources
	for _, rr := range resources {
		if err := protocol.ResponseError(rr.ErrorCode, rr.ErrorMessage); err != nil {
			return nil, fmt.Errorf("mirror %s: %w", rr.ResourceName, err)
		}
	}
	return resources, nil
}

// export is the mirrors file for what exists. Secrets come back as
// references to fill in: the proxy never returns a secret's value.
func exportFile(observed map[string]*observedMirror) *MirrorsFile {
	f := &MirrorsFile{Mirrors: []MirrorSpec{}}
	for _, name := range sortedKeys(observed) {
		om := observed[name]
		m := MirrorSpec{Name: name, Configs: map[string]string{}}
		for _, k := range sortedKeys(om.configs) {
			c := om.configs[k]
			switch {
			case !c.set:
			case c.sensitive:
				m.Configs[k] = secretPlaceholder(name, k)
			case k == "topics.include":
				m.Patterns = mirrorconfig.List(c.value)
			default:
				m.Configs[k] = c.value
			}
		}
		for _, t := range sortedKeys(om.topics) {
			switch om.topics[t] {
			case topicFailedOver:
				m.FailedOver = append(m.FailedOver, t)
			case topicPaused:
				m.Paused = append(m.Paused, t)
				m.Topics = append(m.Topics, t)
			default:
				m.Topics = append(m.Topics, t)
			}
		}
		f.Mirrors = append(f.Mirrors, m)
	}
	return f
}

// secretPlaceholder is the reference --export writes for a secret it cannot
// read: an environment variable named after the mirror and the key.
func secretPlaceholder(mirror, key string) string {
	up := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return r
		}
		return '_'
	}, mirror+"_"+key)
	return "${env:KMIRROR_" + up + "}"
}
