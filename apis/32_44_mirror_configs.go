package apis

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/coordinator"
	"github.com/kmirror/kmirror/coordinator/mirrorconfig"
	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/protocol"
)

// Mirror configs: DescribeConfigs (key 32) and IncrementalAlterConfigs (key 44).
//
// Mirror config resources are resource type 64,
// CLUSTER_MIRROR in the Cluster Mirroring proposal, named by the mirror.
// Changing a mirror's configs while it runs is how its byte-rate limit
// (replication.throttled.rate), patterns, sync filters, fetch sizes and
// retry policy are changed; the keys that say where the source is and how
// to reach it are fixed for the mirror's lifetime.
//
// A stock broker does not know resource type 64, so the proxy answers a
// request naming only mirror resources itself; one mixing them with broker
// resources is refused whole (nothing applied), as kafka-configs never
// sends such a request.

// MirrorResourceType is the config resource type of a mirror.
const MirrorResourceType = 64

const mixedMessage = "a request naming mirror config resources (type 64) must name nothing else; send the mirror's configs in a request of their own"

// classify reports whether a request names mirror resources only (all) or
// some of them (mixed).
func classify(types []int8) (all, mixed bool) {
	n := 0
	for _, t := range types {
		if t == MirrorResourceType {
			n++
		}
	}
	return n > 0 && n == len(types), n > 0 && n < len(types)
}

func resourceTypes[R any](rs []R, typ func(R) int8) []int8 {
	out := make([]int8, len(rs))
	for i, r := range rs {
		out[i] = typ(r)
	}
	return out
}

func alterTypes(req *kmsg.IncrementalAlterConfigsRequest) []int8 {
	return resourceTypes(req.Resources, func(r kmsg.IncrementalAlterConfigsRequestResource) int8 { return int8(r.ResourceType) })
}

func describeTypes(req *kmsg.DescribeConfigsRequest) []int8 {
	return resourceTypes(req.Resources, func(r kmsg.DescribeConfigsRequestResource) int8 { return int8(r.ResourceType) })
}

// namesMirrorResources reports whether a request naming resources of these
// types is answered here (it names a mirror resource, maybe among others).
func namesMirrorResources(types []int8) bool {
	all, mixed := classify(types)
	return all || mixed
}

// AlterMirrorConfigs applies SET, DELETE (back to the default), APPEND and SUBTRACT (list
// configs) to mirror configs; every resource is validated as a whole before
// anything is written, and ValidateOnly writes nothing.
func (b *Backend) AlterMirrorConfigs(ctx context.Context, req *kmsg.IncrementalAlterConfigsRequest) *kmsg.IncrementalAlterConfigsResponse {
	resp := kmsg.NewPtrIncrementalAlterConfigsResponse()
	_, mixed := classify(alterTypes(req))
	var recs []coordinator.Record
	for _, r := range req.Resources {
		out := kmsg.NewIncrementalAlterConfigsResponseResource()
		out.ResourceType, out.ResourceName = r.ResourceType, r.ResourceName
		var err error
		var rec *statetopic.MirrorConfig
		if mixed {
			err = protocol.ErrInvalidRequest.WithMessage(mixedMessage)
		} else {
			rec, err = b.alterMirrorConfig(ctx, r)
		}
		out.ErrorCode, out.ErrorMessage = protocol.ErrorCodeAndMessage(err)
		if err == nil && !req.ValidateOnly {
			recs = append(recs, coordinator.Record{Key: statetopic.MirrorConfigKey(r.ResourceName), Value: rec})
		}
		resp.Resources = append(resp.Resources, out)
	}
	if len(recs) > 0 {
		if err := b.Coord.Write(ctx, recs...); err != nil {
			code, msg := protocol.ErrorCodeAndMessage(protocol.ErrCoordinatorNotAvailable.WithMessage("recording the mirror configs: %v; retry", err))
			for i := range resp.Resources {
				if resp.Resources[i].ErrorCode == 0 {
					resp.Resources[i].ErrorCode, resp.Resources[i].ErrorMessage = code, msg
				}
			}
			return resp
		}
		for _, r := range req.Resources {
			b.Log.Info("mirror configs changed", "mirror", r.ResourceName, "changes", describeOps(r.Configs))
		}
	}
	return resp
}

func (b *Backend) alterMirrorConfig(ctx context.Context, r kmsg.IncrementalAlterConfigsRequestResource) (*statetopic.MirrorConfig, error) {
	m, err := b.Mirror(ctx, r.ResourceName)
	if err != nil {
		return nil, err
	}
	rec := *m.Config
	rec.Configs = make(map[string]string, len(m.Config.Configs))
	for k, v := range m.Config.Configs {
		rec.Configs[k] = v
	}
	for _, c := range r.Configs {
		if mirrorconfig.IsConnection(c.Name) {
			return nil, protocol.ErrInvalidConfig.WithMessage("mirror config %s says where the source is or how to reach it and cannot change while the mirror exists; delete and re-create the mirror to change it", c.Name)
		}
		if mirrorconfig.Doc(c.Name) == "" {
			return nil, protocol.ErrInvalidConfig.WithMessage("unknown mirror config %q; accepted configs are: %s", c.Name, strings.Join(mirrorconfig.Keys(), ", "))
		}
		value := ""
		if c.Value != nil {
			value = *c.Value
		}
		current, set := rec.Configs[c.Name]
		if !set {
			current = mirrorconfig.Default(c.Name)
		}
		switch c.Op {
		case kmsg.IncrementalAlterConfigOpSet:
			rec.Configs[c.Name] = value
		case kmsg.IncrementalAlterConfigOpDelete:
			delete(rec.Configs, c.Name)
		case kmsg.IncrementalAlterConfigOpAppend:
			rec.Configs[c.Name] = strings.Join(mirrorconfig.AppendNew(mirrorconfig.List(current), mirrorconfig.List(value)), ",")
		case kmsg.IncrementalAlterConfigOpSubtract:
			rec.Configs[c.Name] = strings.Join(subtractList(mirrorconfig.List(current), mirrorconfig.List(value)), ",")
		default:
			return nil, protocol.ErrInvalidRequest.WithMessage("unknown config operation %d for %s", c.Op, c.Name)
		}
	}
	if err := mirrorconfig.Validate(rec.Configs); err != nil {
		return nil, protocol.ErrInvalidConfig.WithMessage("%v", err)
	}
	// Every change re-saves the secrets with the current key: how a key
	// rotation or a clear-text secret of an older kmirror gets (re-)encrypted.
	var resealed []string
	rec.Configs, resealed = b.Sources.Secrets().Reseal(r.ResourceName, rec.Configs)
	if len(resealed) > 0 {
		b.Log.Info("re-encrypting the mirror's secrets with the current key", "mirror", r.ResourceName, "configs", resealed, "key", b.Sources.Secrets().Keys().Current())
	}
	return &rec, nil
}

// DescribeMirrorConfigs lists mirror configs: every key, with its value or default;
// secrets are reported as sensitive with no value.
func (b *Backend) DescribeMirrorConfigs(ctx context.Context, req *kmsg.DescribeConfigsRequest) *kmsg.DescribeConfigsResponse {
	resp := kmsg.NewPtrDescribeConfigsResponse()
	_, mixed := classify(describeTypes(req))
	for _, r := range req.Resources {
		out := kmsg.NewDescribeConfigsResponseResource()
		out.ResourceType, out.ResourceName = r.ResourceType, r.ResourceName
		if mixed {
			out.ErrorCode, out.ErrorMessage = protocol.ErrorCodeAndMessage(protocol.ErrInvalidRequest.WithMessage(mixedMessage))
			resp.Resources = append(resp.Resources, out)
			continue
		}
		m, err := b.Mirror(ctx, r.ResourceName)
		if err != nil {
			out.ErrorCode, out.ErrorMessage = protocol.ErrorCodeAndMessage(err)
			resp.Resources = append(resp.Resources, out)
			continue
		}
		want := map[string]bool{}
		for _, k := range r.ConfigNames {
			want[k] = true
		}
		for _, k := range mirrorconfig.Keys() {
			if len(want) > 0 && !want[k] {
				continue
			}
			c := kmsg.NewDescribeConfigsResponseResourceConfig()
			c.Name = k
			v, set := m.Config.Configs[k]
			c.Source = kmsg.ConfigSourceDefaultConfig
			if set {
				c.Source = kmsg.ConfigSourceDynamicBrokerConfig
			} else {
				v = mirrorconfig.DefaultFor(r.ResourceName, k)
			}
			c.IsDefault = !set
			c.ReadOnly = mirrorconfig.IsConnection(k)
			c.IsSensitive = mirrorconfig.IsSecret(k)
			if !c.IsSensitive {
				c.Value = kmsg.StringPtr(v)
			}
			if req.IncludeDocumentation {
				c.Documentation = kmsg.StringPtr(mirrorconfig.Doc(k))
			}
			out.Configs = append(out.Configs, c)
		}
		resp.Resources = append(resp.Resources, out)
	}
	return resp
}

func subtractList(have, drop []string) []string {
	gone := map[string]bool{}
	for _, d := range drop {
		gone[d] = true
	}
	var out []string
	for _, h := range have {
		if !gone[h] {
			out = append(out, h)
		}
	}
	return out
}

func describeOps(cs []kmsg.IncrementalAlterConfigsRequestResourceConfig) string {
	var parts []string
	for _, c := range cs {
		v := "<null>"
		if c.Value != nil {
			v = *c.Value
		}
		if mirrorconfig.IsSecret(c.Name) {
			v = "******"
		}
		parts = append(parts, fmt.Sprintf("%s %s=%s", c.Op, c.Name, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
